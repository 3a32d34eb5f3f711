//! Running `ip` and friends, with errors that show the command and what it printed.

use std::process::{Command, Output, Stdio};

/// Runs a program and returns its stdout; an error shows the command line and stderr.
pub fn run(prog: &str, args: &[&str]) -> Result<String, String> {
    let out = output(prog, args)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{} {}` failed ({}): {}",
            prog,
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

pub fn output(prog: &str, args: &[&str]) -> Result<Output, String> {
    Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {prog}: {e} (is it installed?)"))
}

/// `ip netns exec NS prog args...`
pub fn in_ns(ns: &str, prog: &str, args: &[&str]) -> Result<String, String> {
    let mut a = vec!["netns", "exec", ns, prog];
    a.extend_from_slice(args);
    run("ip", &a)
}

/// `ip -n NS args...`
pub fn ip_n(ns: &str, args: &[&str]) -> Result<String, String> {
    let mut a = vec!["-n", ns];
    a.extend_from_slice(args);
    run("ip", &a)
}

/// Names of all network namespaces.
pub fn namespaces() -> Vec<String> {
    run("ip", &["netns", "list"])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// PIDs of processes inside a namespace.
pub fn ns_pids(ns: &str) -> Vec<i32> {
    run("ip", &["netns", "pids", ns])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// True if `pid` is alive (and not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .is_some_and(|st| st != "Z"),
        Err(_) => false,
    }
}

/// Sends SIGTERM, waits up to `grace`, then SIGKILL. For processes the lab started.
pub fn terminate(pid: i32, grace: std::time::Duration) {
    // SAFETY: kill(2) with a PID the caller started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let t = std::time::Instant::now();
    while alive(pid) && t.elapsed() < grace {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if alive(pid) {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}
