//! The port abstraction every packet I/O backend implements.

use crate::buf::{Pkt, Pool};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// What a transmit call did with the frames it was given.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxResult {
    pub sent: usize,
    pub sent_bytes: usize,
    /// Frames the backend had no room for (a full ring): counted drops, never a block.
    pub ring_full: usize,
}

/// A network port: receives and sends frames in batches.
pub trait Port {
    fn name(&self) -> &str;

    /// Receives up to `max` frames into buffers from `pool`, appending them to `out`, and
    /// returns how many. Never blocks. Frames that did not fit a buffer are counted in
    /// `oversize` rather than returned.
    fn recv(
        &mut self,
        pool: &mut Pool,
        out: &mut Vec<Pkt>,
        max: usize,
        oversize: &mut u64,
    ) -> std::io::Result<usize>;

    /// Sends every frame of `frames`, draining it and returning the buffers to `pool`.
    fn send(&mut self, frames: &mut Vec<Pkt>, pool: &mut Pool) -> std::io::Result<TxResult>;

    /// A file descriptor that becomes readable when frames arrive, for `poll`.
    fn poll_fd(&self) -> Option<i32> {
        None
    }

    /// Every file descriptor to `poll` for this port (one per receive queue it serves).
    fn poll_fds(&self) -> Vec<i32> {
        self.poll_fd().into_iter().collect()
    }

    /// The backend and the mode it runs in, as `show interfaces` reports them.
    fn info(&self) -> PortInfo {
        PortInfo {
            backend: "memory",
            mode: String::new(),
        }
    }

    /// Drops the backend counted itself (the kernel's ring statistics) since the last
    /// call, by reason: `count(reason, n)`.
    fn take_backend_drops(&mut self, _count: &mut dyn FnMut(crate::Drop, u64)) {}

    /// Events the backend counted itself since the last call (AF_XDP: frames sent in
    /// place or copied): `count(event, n)`.
    fn take_backend_events(&mut self, _count: &mut dyn FnMut(crate::counters::Event, u64)) {}
}

/// What a port runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// `xdp`, `packet` or `memory`.
    pub backend: &'static str,
    /// How: ring kind, zero-copy or copy, XDP hook, queues.
    pub mode: String,
}

/// Both ends of an in-memory port: what the element will receive, and what it sent.
#[derive(Debug, Default)]
pub struct MemWire {
    pub to_element: VecDeque<Vec<u8>>,
    pub from_element: Vec<Vec<u8>>,
}

/// An in-memory port for tests and benchmarks: no system calls.
#[derive(Debug, Clone)]
pub struct MemPort {
    name: String,
    pub wire: Rc<RefCell<MemWire>>,
}

impl MemPort {
    pub fn new(name: &str) -> MemPort {
        MemPort {
            name: name.to_string(),
            wire: Rc::default(),
        }
    }
}

impl Port for MemPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn recv(
        &mut self,
        pool: &mut Pool,
        out: &mut Vec<Pkt>,
        max: usize,
        oversize: &mut u64,
    ) -> std::io::Result<usize> {
        let mut w = self.wire.borrow_mut();
        let mut n = 0;
        while n < max {
            let Some(f) = w.to_element.pop_front() else {
                break;
            };
            if f.len() > crate::buf::BUF_CAP {
                *oversize += 1;
                continue;
            }
            let mut p = pool.get();
            p.data.extend_from_slice(&f);
            out.push(p);
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, frames: &mut Vec<Pkt>, pool: &mut Pool) -> std::io::Result<TxResult> {
        let mut w = self.wire.borrow_mut();
        let mut r = TxResult::default();
        for p in frames.drain(..) {
            r.sent += 1;
            r.sent_bytes += p.data.len();
            w.from_element.push(p.data.to_vec());
            pool.put(p);
        }
        Ok(r)
    }
}
