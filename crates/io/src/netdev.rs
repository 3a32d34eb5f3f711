//! Interface properties through ioctls and /proc, and handing an interface to an element.

use std::ffi::CString;
use std::io;
use std::net::Ipv4Addr;

/// Frames an interface's device dropped, from its statistics in sysfs. On receive
/// ([`DeviceDrops::rx`]): `rx_dropped` (a ring with no room or no buffer; on a veth, frames
/// its peer could not queue to it), `rx_missed_errors` and `rx_fifo_errors` (a NIC's own
/// ring full), shed before any work is spent on them; an element counts them as
/// `device_rx_dropped`. On transmit ([`DeviceDrops::tx`]): `tx_dropped` (a queue or ring
/// full; on a veth, frames its peer's ring could not take, those a fast path's program
/// redirected to it included, which no element sees otherwise); `device_tx_dropped`. One
/// port per interface reads them: the first worker's.
#[derive(Debug)]
pub struct DeviceDrops {
    dir: std::path::PathBuf,
    files: &'static [&'static str],
    last: u64,
}

/// The statistics [`DeviceDrops::rx`] sums.
const RX_DROPS: &[&str] = &["rx_dropped", "rx_missed_errors", "rx_fifo_errors"];
/// The statistics [`DeviceDrops::tx`] sums.
const TX_DROPS: &[&str] = &["tx_dropped"];

impl DeviceDrops {
    /// The receive drops of interface `name` from now on; `None` (and a log line) where
    /// sysfs shows another namespace's interface of that name, or none.
    pub fn rx(name: &str) -> Option<DeviceDrops> {
        Self::open(name, RX_DROPS, "device_rx_dropped")
    }

    /// The transmit drops of interface `name` from now on, as [`DeviceDrops::rx`].
    pub fn tx(name: &str) -> Option<DeviceDrops> {
        Self::open(name, TX_DROPS, "device_tx_dropped")
    }

    fn open(name: &str, files: &'static [&'static str], counter: &str) -> Option<DeviceDrops> {
        let dir = std::path::Path::new("/sys/class/net").join(name);
        let sysfs = std::fs::read_to_string(dir.join("ifindex")).ok();
        let same = sysfs
            .and_then(|s| s.trim().parse::<i32>().ok())
            .is_some_and(|i| ifindex(name).ok() == Some(i));
        if !same {
            tracing::warn!(
                interface = name,
                counter,
                "its statistics are not in this namespace's /sys/class/net: the counter stays 0"
            );
            return None;
        }
        Some(Self::at(dir.join("statistics"), files))
    }

    /// The sum of `files` in directory `dir` (a `statistics` directory) from now on.
    pub fn at(dir: std::path::PathBuf, files: &'static [&'static str]) -> DeviceDrops {
        let mut d = DeviceDrops {
            dir,
            files,
            last: 0,
        };
        d.last = d.read();
        d
    }

    fn read(&self) -> u64 {
        self.files
            .iter()
            .filter_map(|f| std::fs::read_to_string(self.dir.join(f)).ok())
            .filter_map(|s| s.trim().parse::<u64>().ok())
            .sum()
    }

    /// Drops since the last call (none if the counts went back, as when the interface
    /// was made again).
    pub fn take(&mut self) -> u64 {
        let now = self.read();
        let d = now.saturating_sub(self.last);
        self.last = now;
        d
    }
}

pub(crate) fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name {name:?}"),
        ));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

fn with_socket<T>(f: impl FnOnce(i32) -> io::Result<T>) -> io::Result<T> {
    // SAFETY: plain socket(2) call; the fd is closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let r = f(fd);
    // SAFETY: fd is ours and open.
    unsafe { libc::close(fd) };
    r
}

fn ioctl(fd: i32, req: libc::c_ulong, r: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: r is a valid, initialised ifreq for the duration of the call.
    if unsafe { libc::ioctl(fd, req as _, r as *mut libc::ifreq) } < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn named(name: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("interface {name}: {e}"))
}

/// The interface index, or an error naming the interface.
pub fn ifindex(name: &str) -> io::Result<i32> {
    let c = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
    // SAFETY: c is a valid NUL-terminated string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(named(
            name,
            io::Error::new(
                io::ErrorKind::NotFound,
                "no such interface in this network namespace",
            ),
        ))
    } else {
        Ok(i as i32)
    }
}

/// The name of the interface with index `index` in this namespace, if there is one.
pub fn ifname(index: u32) -> Option<String> {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf holds IF_NAMESIZE bytes, as if_indextoname(3) requires; it writes a
    // NUL-terminated name there or returns NULL.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: on success buf holds a NUL-terminated string.
    let name = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
    Some(name.to_string_lossy().into_owned())
}

/// Whether `name` is a veth whose peer lives in another network namespace (a container's
/// or a lab host's end): its `iflink` names the peer's index, and no veth of this
/// namespace with that index names `name` back. A socket buffer at the tc ingress hook can
/// then be moved straight into the peer's ingress (`bpf_redirect_peer`).
pub fn veth_peer_elsewhere(name: &str) -> bool {
    let read = |dev: &str, what: &str| -> Option<u32> {
        std::fs::read_to_string(format!("/sys/class/net/{dev}/{what}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    if driver(name).ok().as_deref() != Some("veth") {
        return false;
    }
    let (Some(me), Some(peer)) = (read(name, "ifindex"), read(name, "iflink")) else {
        return false;
    };
    match ifname(peer) {
        Some(p) => !(driver(&p).ok().as_deref() == Some("veth") && read(&p, "iflink") == Some(me)),
        None => true,
    }
}

/// The hardware address.
pub fn mac(name: &str) -> io::Result<[u8; 6]> {
    let mut r = ifreq(name)?;
    with_socket(|fd| ioctl(fd, libc::SIOCGIFHWADDR, &mut r)).map_err(|e| named(name, e))?;
    // SAFETY: SIOCGIFHWADDR filled the ifru_hwaddr member.
    let sa = unsafe { r.ifr_ifru.ifru_hwaddr };
    let mut m = [0u8; 6];
    for (d, s) in m.iter_mut().zip(sa.sa_data.iter()) {
        *d = *s as u8;
    }
    Ok(m)
}

/// The IP MTU.
pub fn mtu(name: &str) -> io::Result<usize> {
    let mut r = ifreq(name)?;
    with_socket(|fd| ioctl(fd, libc::SIOCGIFMTU, &mut r)).map_err(|e| named(name, e))?;
    // SAFETY: SIOCGIFMTU filled the ifru_mtu member.
    Ok(unsafe { r.ifr_ifru.ifru_mtu } as usize)
}

/// The link speed in Mbit/s as the driver reports it (sysfs); 0 when unknown.
pub fn speed_mbps(name: &str) -> u32 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|s| *s > 0)
        .map(|s| s.min(u32::MAX as i64) as u32)
        .unwrap_or(0)
}

/// The interface's driver, as `ethtool -i` names it (`veth`, `ixgbe`...).
pub fn driver(name: &str) -> io::Result<String> {
    const ETHTOOL_GDRVINFO: u32 = 3;
    // struct ethtool_drvinfo: cmd, then driver[32], version[32], fw_version[32],
    // bus_info[32], erom_version[32], reserved2[12] and five u32s.
    let mut info = [0u8; 196];
    info[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_data = info.as_mut_ptr() as *mut libc::c_char;
    with_socket(|fd| ioctl(fd, libc::SIOCETHTOOL, &mut r)).map_err(|e| named(name, e))?;
    let d = &info[4..36];
    let end = d.iter().position(|&b| b == 0).unwrap_or(d.len());
    Ok(String::from_utf8_lossy(&d[..end]).into_owned())
}

/// Sets the interface's MAC address.
pub fn set_mac(name: &str, mac: [u8; 6]) -> io::Result<()> {
    let mut r = ifreq(name)?;
    // SAFETY: writing the sockaddr member of a zeroed ifreq.
    unsafe {
        r.ifr_ifru.ifru_hwaddr.sa_family = libc::ARPHRD_ETHER;
        for (d, s) in r.ifr_ifru.ifru_hwaddr.sa_data.iter_mut().zip(mac) {
            *d = s as libc::c_char;
        }
    }
    with_socket(|fd| ioctl(fd, libc::SIOCSIFHWADDR, &mut r)).map_err(|e| named(name, e))
}

/// Turns IPv6 on on one interface (`ipv6/conf/IF/disable_ipv6=0`), whatever the
/// namespace's default: the kernel gives it its link-local address.
pub fn enable_ipv6(name: &str) -> io::Result<()> {
    write_sysctl(&format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6"), "0")
}

/// Sets the interface's MTU.
pub fn set_mtu(name: &str, mtu: u32) -> io::Result<()> {
    let mut r = ifreq(name)?;
    r.ifr_ifru.ifru_mtu = mtu as libc::c_int;
    with_socket(|fd| ioctl(fd, libc::SIOCSIFMTU, &mut r)).map_err(|e| named(name, e))
}

/// Sets the interface administratively up.
pub fn set_up(name: &str) -> io::Result<()> {
    set_flag(name, libc::IFF_UP as libc::c_short)
}

/// Sets the interface promiscuous (a switch port takes frames for every MAC).
pub fn set_promisc(name: &str) -> io::Result<()> {
    set_flag(name, libc::IFF_PROMISC as libc::c_short)
}

/// Whether the interface is up and its link running (IFF_UP and IFF_RUNNING: for a veth,
/// its peer up too; for a NIC, carrier).
pub fn link_running(name: &str) -> io::Result<bool> {
    let mut r = ifreq(name)?;
    with_socket(|fd| ioctl(fd, libc::SIOCGIFFLAGS, &mut r)).map_err(|e| named(name, e))?;
    // SAFETY: SIOCGIFFLAGS filled the ifru_flags member.
    let flags = unsafe { r.ifr_ifru.ifru_flags } as libc::c_int;
    Ok(flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0)
}

/// Sets one of the interface's flags (SIOCSIFFLAGS), if it is not set.
fn set_flag(name: &str, flag: libc::c_short) -> io::Result<()> {
    let mut r = ifreq(name)?;
    with_socket(|fd| {
        ioctl(fd, libc::SIOCGIFFLAGS, &mut r)?;
        // SAFETY: SIOCGIFFLAGS filled the ifru_flags member.
        let flags = unsafe { r.ifr_ifru.ifru_flags };
        if flags & flag == 0 {
            r.ifr_ifru.ifru_flags = flags | flag;
            ioctl(fd, libc::SIOCSIFFLAGS, &mut r)?;
        }
        Ok(())
    })
    .map_err(|e| named(name, e))
}

/// IPv4 addresses the kernel holds on the interface, with prefix lengths.
pub fn kernel_ipv4_addresses(name: &str) -> io::Result<Vec<(Ipv4Addr, u8)>> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut p = head;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
        if n.to_bytes() == name.as_bytes() && !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr is non-null and points to a sockaddr of its family.
            if unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
                // SAFETY: family is AF_INET, so both are sockaddr_in (netmask may be null).
                let a = unsafe { *(ifa.ifa_addr as *const libc::sockaddr_in) };
                let len = if ifa.ifa_netmask.is_null() {
                    32
                } else {
                    // SAFETY: as above.
                    let m = unsafe { *(ifa.ifa_netmask as *const libc::sockaddr_in) };
                    u32::from_be(m.sin_addr.s_addr).count_ones() as u8
                };
                out.push((Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)), len));
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

fn write_sysctl(path: &str, value: &str) -> io::Result<()> {
    std::fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))
}

/// Hands `name` to an element: link up, and the kernel's own stack kept off it.
///
/// The kernel must hold no IPv4 address on the interface (the element answers ARP and ping
/// for its addresses itself); this returns an error naming the address if it does. Then it
/// sets, for this interface only: `ipv4/conf/IF/forwarding=0` (the kernel does not forward
/// what arrives here), `arp_ignore=8` (it never answers ARP here) and `ipv6/conf/IF/
/// disable_ipv6=1` (no IPv6 addresses, neighbour discovery or MLD). What the kernel still
/// receives it drops, since no address or route of its own matches.
pub fn take_over(name: &str) -> io::Result<()> {
    ifindex(name)?;
    let addrs = kernel_ipv4_addresses(name)?;
    if let Some((a, l)) = addrs.first() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "interface {name} has kernel address {a}/{l}; the element answers for its \
                 addresses itself, so remove it first (ip addr flush dev {name})"
            ),
        ));
    }
    write_sysctl(&format!("/proc/sys/net/ipv4/conf/{name}/forwarding"), "0")?;
    write_sysctl(&format!("/proc/sys/net/ipv4/conf/{name}/arp_ignore"), "8")?;
    let v6 = format!("/proc/sys/net/ipv6/conf/{name}/disable_ipv6");
    if std::path::Path::new(&v6).exists() {
        write_sysctl(&v6, "1")?;
    }
    set_up(name)
}

/// Asks for a receive buffer of `bytes` on socket `fd` (SO_RCVBUFFORCE as root, beyond
/// the system's limit; else SO_RCVBUF within it).
pub fn set_recv_buffer(fd: i32, bytes: usize) -> io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for opt in [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: v is a live c_int of the size given.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                &v as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
    }
    Err(io::Error::last_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_properties() {
        assert_eq!(ifindex("lo").unwrap(), 1);
        assert_eq!(ifname(1).as_deref(), Some("lo"));
        assert_eq!(ifname(u32::MAX), None);
        assert_eq!(mac("lo").unwrap(), [0; 6]);
        assert!(mtu("lo").unwrap() >= 1500);
        let e = ifindex("no-such-if0").unwrap_err().to_string();
        assert!(e.contains("no-such-if0"), "{e}");
        assert!(ifreq("a-name-longer-than-15").is_err());
    }

    #[test]
    fn device_drops_are_the_growth_of_three_counts() {
        let dir = std::env::temp_dir().join(format!("tessera-rxdrops-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let set = |d: u64, m: u64, f: u64| {
            std::fs::write(dir.join("rx_dropped"), format!("{d}\n")).unwrap();
            std::fs::write(dir.join("rx_missed_errors"), format!("{m}\n")).unwrap();
            std::fs::write(dir.join("rx_fifo_errors"), format!("{f}\n")).unwrap();
        };
        set(5, 1, 0);
        let mut r = DeviceDrops::at(dir.clone(), RX_DROPS);
        assert_eq!(r.take(), 0, "counted from now on");
        set(7, 4, 1);
        assert_eq!(r.take(), 6);
        assert_eq!(r.take(), 0);
        // An interface made again starts from zero: nothing is counted backwards.
        set(1, 0, 0);
        assert_eq!(r.take(), 0);
        set(3, 0, 0);
        assert_eq!(r.take(), 2);
        // A count the driver does not keep is not there.
        std::fs::remove_file(dir.join("rx_fifo_errors")).unwrap();
        set_one(&dir, "rx_dropped", 10);
        assert_eq!(r.take(), 7);
        std::fs::remove_dir_all(&dir).unwrap();
        // The loopback interface of this namespace is found; a missing one is not.
        assert!(DeviceDrops::rx("lo").is_some());
        assert!(DeviceDrops::rx("no-such-if0").is_none());
        assert!(DeviceDrops::tx("lo").is_some());
    }

    fn set_one(dir: &std::path::Path, f: &str, v: u64) {
        std::fs::write(dir.join(f), v.to_string()).unwrap();
    }
}
