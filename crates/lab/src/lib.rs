//! Lab topologies: hosts, elements and switches in network namespaces, joined by veth links.
//!
//! A topology file (TOML) names:
//! - `[[host]]`: a namespace with a real Linux stack: addresses and routes set with `ip`.
//! - `[[element]]`: a namespace running one of our elements (`role = "forwarder"`, started
//!   as `tessera forwarder --config ...`), or the Linux kernel as a contender
//!   (`role = "linux"`: the same config file's addresses and routes, kernel forwarding on),
//!   or a bare namespace with its links for a router started by someone else
//!   (`role = "external"`, as `tessera bench forward --contender` does).
//! - `[[switch]]`: a Linux bridge, in a namespace of its own.
//! - `[[link]]`: a veth pair between two endpoints, `"node:ifname"`, or a switch's name.
//!
//! Every namespace is named `ts-<lab>-<node>`, and every interface lives inside the lab's
//! namespaces (they are created there directly), so the lab never touches an interface of
//! the machine and `down` removes exactly what `up` built: it ends the processes inside the
//! lab's namespaces (the elements and whatever was run there with `exec`) and deletes the
//! namespaces, which deletes their interfaces. What `up` started is recorded under
//! `/run/tessera/<lab>/`.
//!
//! Host links behave like physical wires: segmentation and receive offloads (TSO, GSO, GRO,
//! LRO) are switched off on every lab interface, so no frame larger than the MTU crosses a
//! link. Transmit checksum offload stays on, as on real NICs, so elements see frames whose
//! checksum was left to offload and must complete it.

pub mod cmd;
pub mod drops;
mod placement;
mod queue;
pub mod topology;
pub mod upgrade;

pub use topology::{Lab, Topology};
