//! Packet I/O on real interfaces, and the interface helpers an element needs.
//!
//! [`afpacket::AfPacket`] is the AF_PACKET backend: one socket per interface with
//! memory-mapped TPACKET_V3 receive and transmit rings. [`netdev`] reads and sets interface
//! properties and keeps the kernel's own IP stack off the interfaces an element owns.
//!
//! This crate and `lab` are the only ones with `unsafe` and system calls.

pub mod afpacket;
pub mod netdev;
pub mod xdp;

pub use afpacket::{AfPacket, RingConfig, RxRing};
