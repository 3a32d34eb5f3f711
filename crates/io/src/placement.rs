//! Where an element's work runs: CPU lists (`cpus = "4-5"`), pinning threads to them, and
//! the kernel threads that receive for an interface (threaded NAPI), found through the
//! kernel's `netdev` generic netlink family so that the ones of *this* namespace's
//! interface are pinned (their names, `napi/IFNAME-ID`, repeat across namespaces).
//!
//! The receive work of a port (its NAPI poll: the driver, the XDP program, the fast path)
//! runs in softirq context on whichever CPU raised it, charged to no process, unless the
//! interface's NAPI runs in kernel threads of its own (`/sys/class/net/IF/threaded`).
//! Threaded, it can be placed like any thread, and an element's cost stays on its cores.

use crate::genl::{attr, attrs, u32_of, Genl};
use std::io;

const NETDEV_CMD_NAPI_GET: u8 = 11;
const NETDEV_A_NAPI_IFINDEX: u16 = 1;
const NETDEV_A_NAPI_ID: u16 = 2;
const NETDEV_A_NAPI_PID: u16 = 4;

/// A set of CPUs, as Linux writes them: `"0-3,8,10-11"`. A bit set (so that configs that
/// hold one stay `Copy`); [`CpuList::cpus`] lists them in ascending order.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuList([u64; MAX_CPU / 64]);

/// The most CPUs a list may name (the kernel's `cpu_set_t` holds 1024).
pub const MAX_CPU: usize = 1024;

impl std::fmt::Debug for CpuList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CpuList({self})")
    }
}

impl CpuList {
    /// The list of these CPUs (each below [`MAX_CPU`]).
    pub fn of(cpus: &[usize]) -> CpuList {
        let mut l = CpuList::default();
        for &c in cpus.iter().filter(|&&c| c < MAX_CPU) {
            l.0[c / 64] |= 1 << (c % 64);
        }
        l
    }

    /// Parses `"4-5"`, `"3"`, `"0-3,8"`. An empty list, a reversed range or a CPU number
    /// of `MAX_CPU` or more is an error that says which part.
    pub fn parse(s: &str) -> Result<CpuList, String> {
        let mut l = CpuList::default();
        for part in s.split(',') {
            let part = part.trim();
            let num = |t: &str| -> Result<usize, String> {
                let n: usize = t
                    .trim()
                    .parse()
                    .map_err(|_| format!("{part:?} is not a CPU number or a range like 4-5"))?;
                if n >= MAX_CPU {
                    return Err(format!(
                        "CPU {n} is beyond the last one Linux numbers ({})",
                        MAX_CPU - 1
                    ));
                }
                Ok(n)
            };
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let n = num(part)?;
                    (n, n)
                }
            };
            if a > b {
                return Err(format!(
                    "{part:?}: a range goes from the lower CPU to the higher"
                ));
            }
            for c in a..=b {
                l.0[c / 64] |= 1 << (c % 64);
            }
        }
        if l.is_empty() {
            return Err("no CPU named".into());
        }
        Ok(l)
    }

    /// The CPUs, ascending.
    pub fn cpus(&self) -> Vec<usize> {
        (0..MAX_CPU)
            .filter(|&c| self.0[c / 64] & (1 << (c % 64)) != 0)
            .collect()
    }

    /// The list in Linux's notation, ranges folded: `[0,1,2,5]` is `"0-2,5"`.
    pub fn to_linux(&self) -> String {
        let v = self.cpus();
        let mut out: Vec<String> = Vec::new();
        let mut i = 0;
        while i < v.len() {
            let mut j = i;
            while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
                j += 1;
            }
            out.push(if i == j {
                v[i].to_string()
            } else {
                format!("{}-{}", v[i], v[j])
            });
            i = j + 1;
        }
        out.join(",")
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The CPUs of this list that this machine does not have online.
    pub fn missing(&self) -> Vec<usize> {
        let online = online_cpus();
        self.cpus()
            .into_iter()
            .filter(|c| !online.contains(c))
            .collect()
    }
}

impl std::fmt::Display for CpuList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_linux())
    }
}

/// The CPUs online (`/sys/devices/system/cpu/online`); `0..available_parallelism` where
/// that file cannot be read.
pub fn online_cpus() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| CpuList::parse(s.trim()).ok())
        .map(|l| l.cpus())
        .unwrap_or_else(|| {
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
        })
}

/// Pins the thread or process `tid` (0: the calling thread) to `cpus`.
pub fn pin(tid: i32, cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain old data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c < MAX_CPU {
            // SAFETY: c is within the set's capacity.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    // SAFETY: sched_setaffinity(2) with a valid, initialised set of its size.
    if unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs thread `tid` may run on (0: the calling thread).
pub fn affinity(tid: i32) -> io::Result<Vec<usize>> {
    // SAFETY: as in `pin`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity(2) fills the set of the size given.
    if unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) }
        != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: reading bits of an initialised set.
    Ok((0..MAX_CPU)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect())
}

/// One NAPI instance of an interface: its id and, when it runs threaded, its thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Napi {
    pub id: u32,
    pub ifindex: u32,
    /// The kernel thread that polls it (threaded NAPI); none in softirq mode.
    pub pid: Option<i32>,
}

/// The NAPI instances of interface `ifname` in the calling thread's namespace, with their
/// threads where they run threaded. Empty for an interface that runs no NAPI (a veth with
/// neither an XDP program nor GRO).
pub fn napis(ifname: &str) -> io::Result<Vec<Napi>> {
    let index = crate::netdev::ifindex(ifname)? as u32;
    let mut g = Genl::open()?;
    let fam = g.family("netdev")?;
    let mut body = Vec::new();
    attr(&mut body, NETDEV_A_NAPI_IFINDEX, &index.to_ne_bytes());
    let r = g.request(fam, NETDEV_CMD_NAPI_GET, true, &body)?;
    let mut v: Vec<Napi> = r
        .iter()
        .filter_map(|m| {
            let a = attrs(m);
            let get = |k| a.iter().find(|(t, _)| *t == k).and_then(|(_, p)| u32_of(p));
            Some(Napi {
                id: get(NETDEV_A_NAPI_ID)?,
                ifindex: get(NETDEV_A_NAPI_IFINDEX).unwrap_or(index),
                pid: get(NETDEV_A_NAPI_PID).map(|p| p as i32).filter(|&p| p > 0),
            })
        })
        .filter(|n| n.ifindex == index)
        .collect();
    v.sort_by_key(|n| n.id);
    Ok(v)
}

/// Turns threaded NAPI on for `ifname` and returns its
/// NAPI instances with their threads. Waits up to `wait` for threads to appear (they are
/// made when the interface's NAPI is enabled: for a veth, once an XDP program or GRO is
/// on). It writes `/sys/class/net/IF/threaded`: the process's `/sys` must be its
/// namespace's, as under `ip netns exec` (a thread that only entered the namespace sees
/// the old one's `/sys`; it asks [`napis`] after threading them some other way).
pub fn threaded_napis(ifname: &str, wait: std::time::Duration) -> io::Result<Vec<Napi>> {
    let path = format!("/sys/class/net/{ifname}/threaded");
    let cur = std::fs::read_to_string(&path).unwrap_or_default();
    if cur.trim() != "1" && cur.trim() != "enabled" {
        std::fs::write(&path, "1").map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    }
    let t = std::time::Instant::now();
    loop {
        let v = napis(ifname)?;
        if (!v.is_empty() && v.iter().all(|n| n.pid.is_some())) || t.elapsed() >= wait {
            return Ok(v);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Runs `f` on a thread that has entered the network namespace `ns` (a name under
/// `/var/run/netns`), so that the interfaces and netlink sockets it opens are that
/// namespace's; the calling thread stays where it is.
pub fn in_namespace<T: Send>(ns: &str, f: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&path)?;
            use std::os::fd::AsRawFd;
            // SAFETY: setns(2) of this thread only, onto an open namespace file.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            f()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("namespace thread panicked")))
    })
}

/// A thread's name and the CPUs it may use and last ran on, from `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPlace {
    pub tid: i32,
    pub name: String,
    pub allowed: Vec<usize>,
    pub last_cpu: Option<usize>,
}

/// Where the thread `tid` of process `pid` (`tid == pid` for a kernel thread) may run.
pub fn thread_place(pid: i32, tid: i32) -> Option<ThreadPlace> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let name = std::fs::read_to_string(format!("{dir}/comm"))
        .ok()?
        .trim_end()
        .to_string();
    let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|s| CpuList::parse(s.trim()).ok())
        .map(|l| l.cpus())
        .unwrap_or_default();
    // Field 39 of stat is the CPU it last ran on; the name (field 2) may hold spaces, so
    // count from after its closing parenthesis.
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let last_cpu = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(36))
        .and_then(|s| s.parse().ok());
    Some(ThreadPlace {
        tid,
        name,
        allowed,
        last_cpu,
    })
}

/// Every thread of process `pid`, placed.
pub fn process_threads(pid: i32) -> Vec<ThreadPlace> {
    let mut v: Vec<ThreadPlace> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|tid| thread_place(pid, tid))
        .collect();
    v.sort_by_key(|t| t.tid);
    v
}

/// How an element spreads its threads over its CPUs: worker `i` on `cpus[i % n]`; the
/// NAPI threads of its ports on the CPUs the workers leave free where there are any (the
/// receive work beside the worker that takes its frames, not in its way), else over all of
/// them, one after another.
pub fn plan(cpus: &CpuList, workers: usize, napis: usize) -> (Vec<usize>, Vec<usize>) {
    let c = &cpus.cpus();
    if c.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let w: Vec<usize> = (0..workers).map(|i| c[i % c.len()]).collect();
    let spare: Vec<usize> = if c.len() > workers {
        c[workers..].to_vec()
    } else {
        c.clone()
    };
    let n: Vec<usize> = (0..napis).map(|i| spare[i % spare.len()]).collect();
    (w, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_print() {
        assert_eq!(CpuList::parse("4-5").unwrap().cpus(), vec![4, 5]);
        assert_eq!(CpuList::parse("3").unwrap().cpus(), vec![3]);
        assert_eq!(CpuList::parse("0-2, 5,1").unwrap().cpus(), vec![0, 1, 2, 5]);
        assert_eq!(CpuList::parse("1023").unwrap().len(), 1);
        assert_eq!(CpuList::of(&[1, 2, 5]).to_string(), "1-2,5");
        assert_eq!(CpuList::parse("0-2,5,1").unwrap().to_linux(), "0-2,5");
        assert_eq!(CpuList::parse("7,9-10").unwrap().to_string(), "7,9-10");
        for bad in ["", "a", "5-4", "1-", "-1", "1,,2", "2000"] {
            assert!(CpuList::parse(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn plans_workers_then_napi_on_spare_cpus() {
        let c = CpuList::parse("4-5").unwrap();
        assert_eq!(plan(&c, 1, 2), (vec![4], vec![5, 5]));
        assert_eq!(plan(&c, 2, 3), (vec![4, 5], vec![4, 5, 4]));
        let one = CpuList::parse("3").unwrap();
        assert_eq!(plan(&one, 2, 1), (vec![3, 3], vec![3]));
    }

    #[test]
    fn the_calling_thread_can_be_pinned_and_read_back() {
        let online = online_cpus();
        std::thread::spawn(move || {
            pin(0, &online[..1]).unwrap();
            assert_eq!(affinity(0).unwrap(), vec![online[0]]);
            // SAFETY: gettid(2) has no arguments.
            let tid = unsafe { libc::gettid() };
            let me = thread_place(std::process::id() as i32, tid).unwrap();
            assert_eq!(me.allowed, vec![online[0]]);
        })
        .join()
        .unwrap();
    }

    /// The kernel's answer, on a veth of a namespace of the test's own: no NAPI without GRO
    /// or XDP; with GRO, one NAPI per queue, threaded on request, its thread pinnable.
    #[test]
    fn finds_and_pins_a_veths_napi_threads() {
        let ns = crate::test_ns::Netns::with_veth("napi");
        let o = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.0, "ethtool", "-K", "ua", "gro", "off"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        assert_eq!(ns.run(|| napis("ua").unwrap()), vec![]);
        let o = std::process::Command::new("ip")
            .args(["netns", "exec", &ns.0, "ethtool", "-K", "ua", "gro", "on"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let o = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns.0,
                "sh",
                "-c",
                "echo 1 > /sys/class/net/ua/threaded",
            ])
            .output()
            .unwrap();
        assert!(o.status.success(), "{o:?}");
        let v = ns.run(|| napis("ua").unwrap());
        assert_eq!(v.len(), 1, "{v:?}");
        let pid = v[0].pid.expect("a NAPI thread");
        let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
        assert_eq!(name.trim_end(), format!("napi/ua-{}", v[0].id));
        let cpu = online_cpus()[0];
        pin(pid, &[cpu]).unwrap();
        assert_eq!(affinity(pid).unwrap(), vec![cpu]);
        // The other end has no NAPI: nothing to thread, and no error.
        assert_eq!(ns.run(|| napis("ub").unwrap()), vec![]);
        assert!(ns.run(|| napis("nope")).is_err());
    }
}
