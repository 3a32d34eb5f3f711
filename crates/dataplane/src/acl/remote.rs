//! The router's filters as an element receives them from the controller (docs/filters.md,
//! "In the multistage router"): the first worker puts a set's chunks together
//! ([`wire::dist::FilterInbox`]) and hands the whole text to the thread that applies it
//! (in `control`, which parses and merges it with the element's own filters); that
//! thread's answer comes back here, and the worker sends it to the controller. A set the
//! element already answered is answered again from here (the controller repeats a set
//! until it hears an answer).

use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use wire::dist::{FilterChunk, FilterInbox, FiltersAck};
use wire::MacAddr;

/// A whole set from the controller `from`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSet {
    pub from: MacAddr,
    pub version: u32,
    pub digest: u64,
    pub text: Vec<u8>,
}

/// The worker's ends of the channels to the thread that applies sets.
#[derive(Debug)]
pub struct FilterLink {
    pub to_control: SyncSender<RemoteSet>,
    /// Its answers, and the controller to send each to.
    pub answers: Receiver<(MacAddr, FiltersAck)>,
}

/// The control side's ends ([`FilterLink::pair`]).
#[derive(Debug)]
pub struct FilterControl {
    pub sets: Receiver<RemoteSet>,
    pub answers: SyncSender<(MacAddr, FiltersAck)>,
}

impl FilterLink {
    /// A link and the control side's ends.
    pub fn pair() -> (FilterLink, FilterControl) {
        let (to_control, sets) = std::sync::mpsc::sync_channel(4);
        let (answers_tx, answers) = std::sync::mpsc::sync_channel(16);
        (
            FilterLink {
                to_control,
                answers,
            },
            FilterControl {
                sets,
                answers: answers_tx,
            },
        )
    }
}

/// What a chunk came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// More chunks wanted, or a set handed over to be applied.
    Waiting,
    Handed,
    /// A set already answered: send this answer again.
    Answer(FiltersAck),
    /// A chunk out of place, a digest that does not check, or no link: dropped (counted).
    Refused(&'static str),
}

/// The first worker's state: the set being put together and the last answer.
#[derive(Debug, Default)]
pub struct FilterInput {
    pub link: Option<FilterLink>,
    inbox: FilterInbox,
    last: Option<FiltersAck>,
}

impl FilterInput {
    /// Takes chunk `c` from controller `from`.
    pub fn take(&mut self, from: MacAddr, c: &FilterChunk) -> Taken {
        let Some(link) = &self.link else {
            return Taken::Refused("no filter link");
        };
        let text = match self.inbox.take(c) {
            Ok(None) => return Taken::Waiting,
            Ok(Some(t)) => t,
            Err(why) => return Taken::Refused(why),
        };
        if let Some(a) = &self.last {
            if (a.version, a.digest) == (c.version, c.digest) {
                return Taken::Answer(a.clone());
            }
        }
        let set = RemoteSet {
            from,
            version: c.version,
            digest: c.digest,
            text,
        };
        match link.to_control.try_send(set) {
            Ok(()) => Taken::Handed,
            // Busy with sets before it: the controller sends this one again.
            Err(TrySendError::Full(_)) => Taken::Waiting,
            Err(TrySendError::Disconnected(_)) => Taken::Refused("filter thread gone"),
        }
    }

    /// The answers the applying thread made since the last call (the last kept, to
    /// answer a repeated set).
    pub fn answers(&mut self) -> Vec<(MacAddr, FiltersAck)> {
        let Some(link) = &self.link else {
            return Vec::new();
        };
        let got: Vec<_> = link.answers.try_iter().collect();
        if let Some((_, a)) = got.last() {
            self.last = Some(a.clone());
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::dist::{filter_chunks, FiltersStatus};

    #[test]
    fn a_set_is_handed_over_once_and_answered_again_from_here() {
        let (link, ctl) = FilterLink::pair();
        let mut input = FilterInput {
            link: Some(link),
            ..Default::default()
        };
        let from = MacAddr([2, 0, 0, 0, 0xc, 1]);
        let chunks = filter_chunks(3, &[b'x'; 2500]);
        assert_eq!(input.take(from, &chunks[0]), Taken::Waiting);
        assert_eq!(input.take(from, &chunks[1]), Taken::Waiting);
        assert_eq!(input.take(from, &chunks[2]), Taken::Handed);
        let set = ctl.sets.try_recv().unwrap();
        assert_eq!((set.version, set.text.len()), (3, 2500));
        let ack = FiltersAck {
            version: 3,
            digest: set.digest,
            status: FiltersStatus::Applied,
            ..Default::default()
        };
        ctl.answers.send((from, ack.clone())).unwrap();
        assert_eq!(input.answers(), vec![(from, ack.clone())]);
        // The controller repeats the set: answered here, not handed over again.
        for c in &chunks {
            let t = input.take(from, c);
            assert!(t == Taken::Waiting || t == Taken::Answer(ack.clone()));
        }
        assert!(ctl.sets.try_recv().is_err());
        // Without a link: refused.
        let mut none = FilterInput::default();
        assert!(matches!(none.take(from, &chunks[0]), Taken::Refused(_)));
    }
}
