//! The processes and kernel threads a lab bench drives besides its points: a device under
//! test started by command, and the receive threads of an interface.

use std::path::Path;
use std::process::{Command, Stdio};

/// Moves the NAPI of `node:ifname` into kernel threads of its own (`threaded`) and returns
/// their PIDs, as the kernel's `netdev` netlink family of the node's namespace names them
/// (thread names repeat across namespaces; already threaded ones, an element placed with
/// `cpus`, count too). None for an interface that runs no NAPI (a veth with neither XDP
/// nor GRO): an empty list then, after a wait of up to 2 s.
pub(crate) fn threaded_napi(lab: &lab::Lab, node: &str, ifname: &str) -> Result<Vec<i32>, String> {
    let t = std::time::Instant::now();
    loop {
        let mine: Vec<i32> = lab
            .thread_napi(node, ifname)?
            .iter()
            .filter_map(|n| n.pid)
            .collect();
        if !mine.is_empty() || t.elapsed() > std::time::Duration::from_secs(2) {
            return Ok(mine);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Puts NAPI threads at SCHED_FIFO priority 50 (`--rt-napi`).
pub(crate) fn realtime_napi(pids: &[i32]) -> Result<(), String> {
    for &pid in pids {
        let param = libc::sched_param { sched_priority: 50 };
        // SAFETY: sched_setscheduler(2) on a kernel thread's PID with a valid param.
        if unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &param) } != 0 {
            return Err(format!(
                "NAPI thread {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// A device under test started by command (`sh -c`) in its namespace, with `env` added
/// to its environment and its output to `log` (or nowhere); its process group is ended
/// when this is dropped.
pub(crate) struct External {
    pgid: i32,
    child: std::process::Child,
}

impl External {
    pub(crate) fn start(
        ns: &str,
        cmd: &str,
        env: &[(&str, String)],
        log: Option<&Path>,
    ) -> Result<External, String> {
        use std::os::unix::process::CommandExt;
        let out = match log {
            Some(p) => {
                Stdio::from(std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?)
            }
            None => Stdio::null(),
        };
        let err = match log {
            Some(p) => Stdio::from(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(p)
                    .map_err(|e| format!("{}: {e}", p.display()))?,
            ),
            None => Stdio::null(),
        };
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "sh", "-c", cmd])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|e| format!("{cmd:?}: {e}"))?;
        Ok(External {
            pgid: child.id() as i32,
            child,
        })
    }

    /// The command's exit status, if it has ended (a command that only configures the
    /// namespace ends at once; a daemon runs on).
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for External {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group this bench started.
        unsafe { libc::kill(-self.pgid, libc::SIGTERM) };
        std::thread::sleep(std::time::Duration::from_millis(300));
        // SAFETY: as above.
        unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
        let _ = self.child.try_wait();
    }
}
