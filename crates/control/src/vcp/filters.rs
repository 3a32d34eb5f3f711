//! The router's filters as the controller distributes them (docs/filters.md, "In the
//! multistage router"): the lists and the external interfaces' bindings of its file, as
//! two sets, one for the LBs (the lists, `acl_in` and `acl_out`: they run where a frame
//! enters and leaves the router) and one for the back-ends (the reverse-path checks: they
//! need the routes, which only the back-ends hold). Each set has a version (one more per
//! change) and a digest, and goes to every LB or back-end in chunks until it answers for
//! that version in its current incarnation; an element that restarts gets it again.

use super::*;
use crate::config::RouterFilters;
use wire::dist::{filter_chunks, FilterChunk, FiltersAck, FiltersStatus};

/// How long the controller waits for an answer before it sends a set again.
pub const FILTERS_RESEND: Duration = Duration::from_secs(1);

/// One element's state of its set.
#[derive(Debug, Clone, Default)]
pub struct FilterPeer {
    /// Its last answer.
    pub answer: Option<FiltersAck>,
    /// When the set may go again.
    next_send: Option<Instant>,
    /// Times the set was sent whole to it.
    pub sends: u64,
}

/// The router's filters and every element's state of them.
#[derive(Debug, Default)]
pub struct FilterDist {
    pub set: RouterFilters,
    pub version: u32,
    /// The chunks of the LBs' set and of the back-ends'.
    lb: Vec<FilterChunk>,
    be: Vec<FilterChunk>,
    pub peers: BTreeMap<MacAddr, FilterPeer>,
    /// Answers from elements the controller does not know.
    pub answers_unknown: u64,
}

impl FilterDist {
    pub fn new(set: RouterFilters) -> FilterDist {
        let mut d = FilterDist::default();
        d.replace(set);
        d
    }

    /// Makes `set` the router's filters: a new version if it differs. Whether it did.
    pub fn replace(&mut self, set: RouterFilters) -> bool {
        if self.version != 0 && set == self.set {
            return false;
        }
        self.version = self.version.wrapping_add(1).max(1);
        self.lb = filter_chunks(self.version, set.for_balancers().text().as_bytes());
        self.be = filter_chunks(self.version, set.for_backends().text().as_bytes());
        self.set = set;
        for p in self.peers.values_mut() {
            p.next_send = None;
        }
        true
    }

    fn chunks(&self, kind: ElementKind) -> Option<&[FilterChunk]> {
        match kind {
            ElementKind::Balancer => Some(&self.lb),
            ElementKind::Forwarder => Some(&self.be),
            ElementKind::Controller => None,
        }
    }

    /// Whether element `mac`'s answer is for the current set in its incarnation `inc`.
    fn current(&self, mac: &MacAddr, kind: ElementKind, inc: u64) -> bool {
        let Some(c) = self.chunks(kind).and_then(|c| c.first()) else {
            return true;
        };
        self.peers
            .get(mac)
            .and_then(|p| p.answer.as_ref())
            .is_some_and(|a| (a.version, a.digest, a.incarnation) == (c.version, c.digest, inc))
    }

    /// The chunks due now, to each LB and back-end whose answer is not current.
    pub fn tick(
        &mut self,
        elements: &BTreeMap<MacAddr, ElementInfo>,
        now: Instant,
        out: &mut Vec<(MacAddr, FilterChunk)>,
    ) {
        for (mac, e) in elements {
            let inc = e.state.map_or(0, |s| s.incarnation);
            if self.current(mac, e.kind, inc) {
                continue;
            }
            let Some(chunks) = self.chunks(e.kind) else {
                continue;
            };
            let chunks = chunks.to_vec();
            let p = self.peers.entry(*mac).or_default();
            if p.next_send.is_some_and(|t| now < t) {
                continue;
            }
            p.next_send = Some(now + FILTERS_RESEND);
            p.sends += 1;
            out.extend(chunks.into_iter().map(|c| (*mac, c)));
        }
        self.peers.retain(|m, _| elements.contains_key(m));
    }

    /// Element `src`'s answer.
    pub fn answer(&mut self, src: MacAddr, a: FiltersAck, known: bool) {
        if !known {
            self.answers_unknown += 1;
            return;
        }
        if a.status == FiltersStatus::Refused
            && self.peers.get(&src).and_then(|p| p.answer.as_ref()) != Some(&a)
        {
            tracing::warn!(element = %src, version = a.version, reason = %a.reason, "the router's filters refused");
        }
        self.peers.entry(src).or_default().answer = Some(a);
    }

    /// `tessera show acl` on the controller: the set, its digests, and every element's
    /// answer (`name` gives an element's reported name).
    pub fn json(
        &self,
        elements: &BTreeMap<MacAddr, ElementInfo>,
        name: impl Fn(&MacAddr) -> Option<String>,
    ) -> Value {
        let els: Vec<Value> = elements
            .iter()
            .filter(|(_, e)| e.kind != ElementKind::Controller)
            .map(|(m, e)| {
                let inc = e.state.map_or(0, |s| s.incarnation);
                let p = self.peers.get(m);
                let a = p.and_then(|p| p.answer.as_ref());
                json!({
                    "mac": m.to_string(),
                    "element": name(m),
                    "kind": if e.kind == ElementKind::Balancer { "balancer" } else { "backend" },
                    "current": self.current(m, e.kind, inc),
                    "version": a.map(|a| a.version),
                    "status": a.map(|a| match a.status {
                        FiltersStatus::Applied => "applied",
                        FiltersStatus::Refused => "refused",
                    }),
                    "reason": a.filter(|a| !a.reason.is_empty()).map(|a| &a.reason),
                    "sends": p.map_or(0, |p| p.sends),
                })
            })
            .collect();
        let digest = |c: &[FilterChunk]| c.first().map(|c| format!("{:016x}", c.digest));
        json!({
            "version": self.version,
            "acl": self.set.acls.iter().map(|l| json!({
                "name": l.name,
                "default": l.default.as_str(),
                "rules": l.rules.iter().map(crate::filters::rule_text).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "interfaces": self.set.interfaces.iter().map(|(v, f)| json!({
                "name": format!("vlan{v}"),
                "acl_in": f.acl_in,
                "acl_out": f.acl_out,
                "urpf": f.urpf.as_str(),
                "urpf_allow_default": f.urpf_allow_default,
            })).collect::<Vec<_>>(),
            "digest_balancers": digest(&self.lb),
            "digest_backends": digest(&self.be),
            "answers_unknown": self.answers_unknown,
            "elements": els,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(kind: ElementKind, inc: u64, now: Instant) -> ElementInfo {
        ElementInfo {
            kind,
            ports: Vec::new(),
            addrs6: Vec::new(),
            interval: Duration::from_millis(100),
            last_seen: now,
            since: now,
            rx_packets: 0,
            tx_packets: 0,
            dropped: 0,
            priority: 0,
            active: false,
            state: Some(dist::HelloState {
                incarnation: inc,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_set_goes_until_answered_and_again_after_a_restart_or_a_change() {
        let set = |s: &str| RouterFilters::parse(Path::new("vcp.toml"), s).unwrap();
        let mut d = FilterDist::new(set(
            "[[acl]]\nname = \"in\"\n[[acl.rule]]\naction = \"deny\"\nprotocol = \"tcp\"\ndst_port = 22\n[[interface]]\nname = \"vlan10\"\nacl_in = \"in\"\nurpf = \"strict\"\n",
        ));
        let t0 = Instant::now();
        let (lb, be) = (MacAddr([2, 0, 0, 0, 0xa, 1]), MacAddr([2, 0, 0, 0, 1, 1]));
        let mut els = BTreeMap::new();
        els.insert(lb, element(ElementKind::Balancer, 5, t0));
        els.insert(be, element(ElementKind::Forwarder, 6, t0));
        let mut out = Vec::new();
        d.tick(&els, t0, &mut out);
        assert_eq!(out.len(), 2);
        let lb_chunk = out.iter().find(|(m, _)| *m == lb).unwrap().1.clone();
        let be_chunk = out.iter().find(|(m, _)| *m == be).unwrap().1.clone();
        assert_ne!(lb_chunk.digest, be_chunk.digest);
        // The LB's set has the list, the back-end's only the reverse-path check.
        let text = |c: &FilterChunk| String::from_utf8(c.data.clone()).unwrap();
        assert!(text(&lb_chunk).contains("acl_in") && !text(&lb_chunk).contains("urpf"));
        assert!(text(&be_chunk).contains("strict") && !text(&be_chunk).contains("[[acl]]"));
        // Not again before the resend time; again after it, unanswered.
        out.clear();
        d.tick(&els, t0 + Duration::from_millis(10), &mut out);
        assert!(out.is_empty());
        d.tick(&els, t0 + FILTERS_RESEND, &mut out);
        assert_eq!(out.len(), 2);
        // Answered: quiet. A refusal is an answer too.
        let ack = |c: &FilterChunk, inc, status| FiltersAck {
            version: c.version,
            digest: c.digest,
            incarnation: inc,
            status,
            reason: String::new(),
        };
        d.answer(lb, ack(&lb_chunk, 5, FiltersStatus::Applied), true);
        d.answer(be, ack(&be_chunk, 6, FiltersStatus::Refused), true);
        out.clear();
        d.tick(&els, t0 + 3 * FILTERS_RESEND, &mut out);
        assert!(out.is_empty());
        // The LB restarts (a new incarnation): it gets the set again.
        els.insert(lb, element(ElementKind::Balancer, 7, t0));
        d.tick(&els, t0 + 4 * FILTERS_RESEND, &mut out);
        assert_eq!(out.iter().map(|(m, _)| *m).collect::<Vec<_>>(), vec![lb]);
        // A change: a new version to both, at once.
        assert!(!d.replace(d.set.clone()));
        assert!(d.replace(set("[[interface]]\nname = \"vlan20\"\nurpf = \"loose\"\n")));
        out.clear();
        d.tick(&els, t0 + 4 * FILTERS_RESEND, &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(_, c)| c.version == 2));
        let v = d.json(&els, |_| None);
        assert_eq!(v["version"], 2);
        assert_eq!(v["elements"].as_array().unwrap().len(), 2);
    }
}
