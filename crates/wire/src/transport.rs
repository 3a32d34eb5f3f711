//! What IPv4, IPv6, TCP and UDP share: the transports' protocol numbers (the same in IPv4's
//! protocol field and IPv6's next header) and where each keeps its checksum. A leaf
//! module, so that the network layers and the transports need not name each other.

/// TCP's protocol number (IPv4) and next-header value (IPv6).
pub const TCP: u8 = 6;
/// UDP's protocol number (IPv4) and next-header value (IPv6).
pub const UDP: u8 = 17;

/// Offset of the checksum field in a TCP header.
pub const TCP_CHECKSUM_AT: usize = 16;
/// Offset of the checksum field in a UDP header.
pub const UDP_CHECKSUM_AT: usize = 6;

/// Where the checksum field sits in the header of the transport `protocol` names (TCP or
/// UDP); `None` for any other.
pub fn checksum_at(protocol: u8) -> Option<usize> {
    match protocol {
        TCP => Some(TCP_CHECKSUM_AT),
        UDP => Some(UDP_CHECKSUM_AT),
        _ => None,
    }
}
