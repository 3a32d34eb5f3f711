//! Generic netlink, as far as the elements need it: the controller family (a family's
//! id and multicast groups) and requests to the `netdev` family (NAPI instances, a
//! device's XDP features), and a socket that listens to a family's notifications.

use std::io;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;

/// A generic netlink socket of the calling thread's network namespace.
pub(crate) struct Genl {
    fd: i32,
    seq: u32,
}

impl Drop for Genl {
    fn drop(&mut self) {
        // SAFETY: fd is ours and open.
        unsafe { libc::close(self.fd) };
    }
}

pub(crate) fn attr(out: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(data);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// The attributes of `b` (type without its flag bits, payload); stops at the first one
/// whose length does not fit.
pub(crate) fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut v = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            break;
        }
        v.push((kind, &b[4..len]));
        let next = (len + 3) & !3;
        b = &b[next.min(b.len())..];
    }
    v
}

pub(crate) fn u32_of(p: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(p.get(..4)?.try_into().ok()?))
}

impl Genl {
    pub(crate) fn open() -> io::Result<Genl> {
        // SAFETY: plain socket(2) call; the fd is closed on drop.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_GENERIC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let g = Genl { fd, seq: 1 };
        // A reply that never comes must not hang the caller.
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        // SAFETY: setsockopt(2) with a valid timeval of its size.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tv as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        Ok(g)
    }

    /// Sends one request and collects the payloads (after the generic header) of every
    /// reply message until the kernel says done (a dump) or answers once (not a dump).
    pub(crate) fn request(
        &mut self,
        family: u16,
        cmd: u8,
        dump: bool,
        body: &[u8],
    ) -> io::Result<Vec<Vec<u8>>> {
        self.seq += 1;
        let mut m = Vec::with_capacity(20 + body.len());
        let len = 16 + 4 + body.len();
        let flags = libc::NLM_F_REQUEST as u16 | if dump { libc::NLM_F_DUMP as u16 } else { 0 };
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&family.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&self.seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&[cmd, 1, 0, 0]);
        m.extend_from_slice(body);
        // SAFETY: send(2) of a buffer we own, of its length.
        let n = unsafe { libc::send(self.fd, m.as_ptr() as *const libc::c_void, m.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            // SAFETY: recv(2) into a buffer we own, of its length.
            let n =
                unsafe { libc::recv(self.fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut b = &buf[..n as usize];
            while b.len() >= 16 {
                let len = u32_of(b).unwrap_or(0) as usize;
                let kind = u16::from_ne_bytes([b[4], b[5]]);
                if len < 16 || len > b.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "netlink: a message overruns its datagram",
                    ));
                }
                let payload = &b[16..len];
                match kind {
                    NLMSG_DONE => return Ok(out),
                    NLMSG_ERROR => {
                        let code = payload
                            .get(..4)
                            .map_or(0, |e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
                        if code != 0 {
                            return Err(io::Error::from_raw_os_error(-code));
                        }
                        return Ok(out);
                    }
                    _ => out.push(payload.get(4..).unwrap_or_default().to_vec()),
                }
                b = &b[((len + 3) & !3).min(b.len())..];
                if !dump && !out.is_empty() {
                    return Ok(out);
                }
            }
        }
    }

    pub(crate) fn family(&mut self, name: &str) -> io::Result<u16> {
        let mut body = Vec::new();
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        attr(&mut body, CTRL_ATTR_FAMILY_NAME, &n);
        let r = self.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, false, &body)?;
        r.iter()
            .flat_map(|m| attrs(m))
            .find(|(k, _)| *k == CTRL_ATTR_FAMILY_ID)
            .and_then(|(_, p)| p.get(..2).map(|b| u16::from_ne_bytes([b[0], b[1]])))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("generic netlink family {name} not found"),
                )
            })
    }

    /// The id of multicast group `group` of family `family`.
    pub(crate) fn group(&mut self, family: &str, group: &str) -> io::Result<u32> {
        let mut body = Vec::new();
        let mut n = family.as_bytes().to_vec();
        n.push(0);
        attr(&mut body, CTRL_ATTR_FAMILY_NAME, &n);
        let r = self.request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, false, &body)?;
        let want = [group.as_bytes(), b"\0"].concat();
        r.iter()
            .flat_map(|m| attrs(m))
            .filter(|(k, _)| *k == CTRL_ATTR_MCAST_GROUPS)
            .flat_map(|(_, p)| attrs(p))
            .map(|(_, g)| attrs(g))
            .find(|g| {
                g.iter()
                    .any(|(k, v)| *k == CTRL_ATTR_MCAST_GRP_NAME && *v == &want[..])
            })
            .and_then(|g| {
                g.iter()
                    .find(|(k, _)| *k == CTRL_ATTR_MCAST_GRP_ID)
                    .and_then(|(_, v)| u32_of(v))
            })
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("generic netlink family {family} has no group {group}"),
                )
            })
    }

    /// Joins multicast group `id`: the kernel's notifications to it arrive on this socket
    /// (use one socket for notifications and another for requests).
    pub(crate) fn join(&mut self, id: u32) -> io::Result<()> {
        const SOL_NETLINK: i32 = 270;
        const NETLINK_ADD_MEMBERSHIP: i32 = 1;
        // SAFETY: setsockopt(2) with a u32 of its size.
        let r = unsafe {
            libc::setsockopt(
                self.fd,
                SOL_NETLINK,
                NETLINK_ADD_MEMBERSHIP,
                &id as *const u32 as *const libc::c_void,
                4,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `wait` for a notification; whether one (or more) came. Reads whatever
    /// is queued.
    pub(crate) fn wait_notification(&mut self, wait: std::time::Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = wait.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: poll(2) on one pollfd we own.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        if n == 0 {
            return Ok(false);
        }
        let mut buf = vec![0u8; 16384];
        loop {
            // SAFETY: recv(2) into a buffer we own, of its length.
            let r = unsafe {
                libc::recv(
                    self.fd,
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                // Drained (or an overrun, ENOBUFS: notifications were lost, so the caller
                // looks again anyway).
                return Ok(true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netlink_attributes_round_trip() {
        let mut b = Vec::new();
        attr(&mut b, 1, &7u32.to_ne_bytes());
        attr(&mut b, 2, b"ab\0");
        let a = attrs(&b);
        assert_eq!(a.len(), 2);
        assert_eq!(u32_of(a[0].1), Some(7));
        assert_eq!(a[1], (2, &b"ab\0"[..]));
        // A truncated attribute ends the walk, without a panic.
        assert_eq!(attrs(&b[..6]).len(), 0);
    }
}
