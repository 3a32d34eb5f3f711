//! What an LB sends the controller besides its hellos: its counters, and its answers to
//! the controller's filter sets.

use super::*;

impl Balancer {
    /// Sends the counters to the controller out of every internal port.
    pub(super) fn send_reports(&mut self, name: &str, tx: &mut TxQueues) {
        let external: Vec<bool> = self
            .ports
            .iter()
            .map(|p| p.role == PortRole::External)
            .collect();
        let sum = self.group_counters();
        let names = &self.counters.port_names;
        for m in crate::report::counter_reports_of(name, names, sum, &external) {
            self.send_internal(m, MacAddr::BROADCAST, Event::DistReportsSent, tx);
        }
    }

    /// Sends the answers to the controller's filter sets out of every internal port.
    pub(super) fn send_filter_answers(&mut self, tx: &mut TxQueues) {
        let mut answers = std::mem::take(&mut self.filter_answers);
        answers.extend(self.filter_input.answers());
        for (to, mut a) in answers {
            a.incarnation = self.incarnation;
            let m = dist::Message::FiltersAck(a);
            self.send_internal(m, to, Event::DistFilterAnswers, tx);
        }
    }

    /// Sends `m` to `to`, sealed, out of every internal port, counting `event` per frame.
    fn send_internal(&mut self, m: dist::Message, to: MacAddr, event: Event, tx: &mut TxQueues) {
        self.seq = self.seq.wrapping_add(1);
        let r = dist::Repr {
            seq: self.seq,
            msg: m,
        };
        for i in self.internal_ports().collect::<Vec<_>>() {
            if let Ok(mut f) = r.to_frame(self.ports[i as usize].mac, to) {
                self.dist_auth.seal(&mut f);
                let mut p = self.pool.get();
                p.data.extend_from_slice(&f);
                self.counters.event(event);
                tx.push(i, p);
            }
        }
    }
}
