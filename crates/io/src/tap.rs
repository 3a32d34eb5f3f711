//! TAP interfaces: an Ethernet interface of the kernel whose frames an element reads and
//! writes. The Virtual-CP presents one per external network of the router, so that a
//! routing suite in its namespace runs unchanged on ordinary interfaces.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETPERSIST: libc::c_ulong = 0x4004_54cb;

/// An open TAP interface. It is persistent: it stays (without carrier) when this process
/// exits, so the routing suite keeps its interface, address and sessions across a restart
/// of the element, which attaches to it again by name. `ip link del NAME` removes it.
pub struct Tap {
    fd: OwnedFd,
    name: String,
}

impl Tap {
    /// Creates TAP `name`, or attaches to it if it exists, with `mac`; brings it up with
    /// `addr/len` (if given) and `mtu`.
    pub fn create(
        name: &str,
        mac: [u8; 6],
        addr: Option<(Ipv4Addr, u8)>,
        mtu: u32,
    ) -> io::Result<Tap> {
        // SAFETY: open(2) of a fixed path; the fd is owned below.
        let fd = unsafe { libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("/dev/net/tun: {}", io::Error::last_os_error()),
            ));
        }
        // SAFETY: fd was just opened and is ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut r = crate::netdev::ifreq(name)?;
        r.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: r is a valid ifreq for the duration of the call.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF as _, &mut r as *mut libc::ifreq) } < 0 {
            return Err(io::Error::other(format!(
                "TAP {name}: {}",
                io::Error::last_os_error()
            )));
        }
        // SAFETY: an integer argument on our TAP's fd.
        if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETPERSIST as _, 1 as libc::c_ulong) } < 0 {
            return Err(io::Error::other(format!(
                "TAP {name}: TUNSETPERSIST: {}",
                io::Error::last_os_error()
            )));
        }
        if crate::netdev::mac(name)? != mac {
            crate::netdev::set_mac(name, mac)?;
        }
        crate::netdev::set_mtu(name, mtu)?;
        crate::netdev::set_up(name)?;
        if let Some((a, l)) = addr {
            let st = std::process::Command::new("ip")
                .args(["addr", "replace", &format!("{a}/{l}"), "dev", name])
                .status()?;
            if !st.success() {
                return Err(io::Error::other(format!("ip addr on {name} failed")));
            }
        }
        Ok(Tap {
            fd,
            name: name.to_string(),
        })
    }

    /// Gives the TAP IPv6 address `addr/len` (without duplicate address detection: the
    /// address is the router's, answered for on the wire by the element that owns the
    /// port). IPv6 must be on on the TAP.
    pub fn add_addr6(&self, addr: std::net::Ipv6Addr, len: u8) -> io::Result<()> {
        let st = std::process::Command::new("ip")
            .args([
                "-6",
                "addr",
                "replace",
                &format!("{addr}/{len}"),
                "dev",
                &self.name,
                "nodad",
            ])
            .status()?;
        if !st.success() {
            return Err(io::Error::other(format!(
                "ip -6 addr {addr}/{len} on {} failed",
                self.name
            )));
        }
        Ok(())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Reads one frame (blocks until one comes).
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    /// Writes one frame to the kernel.
    pub fn write(&self, frame: &[u8]) -> io::Result<usize> {
        // SAFETY: frame is valid for reads of its length.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}
