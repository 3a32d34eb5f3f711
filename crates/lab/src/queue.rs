//! A host's transmit queue.

use crate::cmd::in_ns;
use crate::topology::Lab;

/// The queue's length in packets: what Linux gives an Ethernet device (`txqueuelen`).
const HOST_QUEUE: &str = "1000";

impl Lab {
    /// Gives a host's interface a transmit queue, as a real host's NIC has: a pfifo of
    /// 1,000 packets in place of a veth's `noqueue`. When the ring of the veth's peer (256
    /// frames) is full, because the element behind it did not get its CPU for a moment,
    /// the kernel holds the host's packets in the queue and sends them once the peer has
    /// drained (veth back-pressure, Linux 6.16 and later), where with `noqueue` it dropped
    /// them at the host's own transmit (`tx_dropped`; a UDP sender's `SndbufErrors`).
    /// Frames a generator sends on its AF_PACKET ring (which bypasses the queue) or in XDP,
    /// and frames an element redirects in XDP, do not pass through it.
    pub(crate) fn host_queue(&self, ns: &str, ifname: &str) -> Result<(), String> {
        in_ns(
            ns,
            "tc",
            &[
                "qdisc", "replace", "dev", ifname, "root", "pfifo", "limit", HOST_QUEUE,
            ],
        )
        .map(|_| ())
    }
}
