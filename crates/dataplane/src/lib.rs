//! The data plane: packet buffers, ports, counters, and the forwarding nodes.
//!
//! A worker receives a batch of frames from its ports, runs each through the role's nodes
//! and queues the survivors per egress port ([`TxQueues`]); the run loop then hands each
//! queue to its port in one call. Nothing here makes a system call; the [`port::Port`] trait
//! is implemented by the `io` crate for real interfaces and by [`port::MemPort`] for tests
//! and benchmarks.
#![forbid(unsafe_code)]

pub mod acl;
pub mod axon;
pub mod balancer;
pub mod buf;
pub mod capture;
pub mod counters;
pub mod element;
pub mod flows;
pub mod forwarder;
pub mod frag;
pub mod fuzzing;
pub mod iface;
pub mod neighbour;
pub mod port;
pub mod reasm;
pub mod report;
pub mod routes;
pub mod switch;

pub use buf::{Meta, Pkt, Pool, TxQueues};
pub use counters::{Counters, Drop, Event};
