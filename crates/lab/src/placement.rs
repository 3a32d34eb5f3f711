//! Where a lab's work runs: `cpus = "4-5"` on a `[[host]]` or an `[[element]]`.
//!
//! An element that is a `tessera` process gets `--cpus` and places itself (its `[io]
//! cpus`: workers, and its ports' receive work in NAPI threads of their own). For a host
//! or a `linux` element (the kernel forwards there), the lab does what it can from
//! outside: its interfaces' receive work moves to NAPI threads pinned to the node's CPUs
//! ([`Lab::place`]), and what runs there with `lab exec` (the benches' generators and
//! sinks too, through [`Lab::command`]) is kept to them. A veth runs NAPI only with an XDP
//! program or GRO on: without, its receive work runs on the sender's CPU, and `lab show`
//! says so (`napi: []`).

use crate::cmd::{self, ip_n};
use crate::topology::Lab;
use io::placement::{self, CpuList};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::process::Command;

impl Lab {
    /// The CPUs of a node (`cpus`), if it names any. The topology was checked at load.
    pub fn cpus(&self, node: &str) -> Option<CpuList> {
        let t = &self.topo;
        t.host
            .iter()
            .find(|h| h.name == node)
            .and_then(|h| h.cpus.as_deref())
            .or_else(|| {
                t.element
                    .iter()
                    .find(|e| e.name == node)
                    .and_then(|e| e.cpus.as_deref())
            })
            .and_then(|c| CpuList::parse(c).ok())
    }

    /// Checks every `cpus` of the topology: the notation, and that this machine has them.
    pub(crate) fn validate_cpus(&self) -> Result<(), String> {
        let named = self
            .topo
            .host
            .iter()
            .map(|h| (&h.name, &h.cpus))
            .chain(self.topo.element.iter().map(|e| (&e.name, &e.cpus)));
        for (node, c) in named {
            let Some(c) = c else { continue };
            let l = CpuList::parse(c).map_err(|e| format!("{node}: cpus = {c:?}: {e}"))?;
            let missing = l.missing();
            if !missing.is_empty() {
                return Err(format!(
                    "{node}: cpus = {c:?}: this machine has no CPU {} (online: {})",
                    CpuList::of(&missing),
                    CpuList::of(&placement::online_cpus())
                ));
            }
        }
        Ok(())
    }

    /// `ip netns exec NS argv...` for a node, kept to the node's CPUs where it names some.
    pub fn command(&self, node: &str, argv: &[impl AsRef<std::ffi::OsStr>]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(node)]).args(argv);
        if let Some(l) = self.cpus(node) {
            let cpus = l.cpus();
            // SAFETY: the closure runs in the child between fork and exec and calls only
            // sched_setaffinity(2), which is async-signal-safe.
            unsafe {
                c.pre_exec(move || placement::pin(0, &cpus));
            }
        }
        c
    }

    /// The interfaces of a node (its namespace's, but `lo`).
    fn interface_names(&self, node: &str) -> Vec<String> {
        let out = ip_n(&self.ns(node), &["-j", "link", "show"]).unwrap_or_default();
        let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["ifname"].as_str())
            .filter(|n| *n != "lo")
            .map(str::to_string)
            .collect()
    }

    /// Moves the receive work of a host's or `linux` element's interfaces into NAPI
    /// threads pinned to its CPUs, round robin; nothing for a node without `cpus`. Call it
    /// again after turning GRO on (a veth makes its NAPI then). Returns per interface its
    /// NAPI threads and their CPUs.
    pub fn place(&self, node: &str) -> Result<Value, String> {
        let Some(l) = self.cpus(node) else {
            return Ok(Value::Null);
        };
        let cpus = l.cpus();
        let mut k = 0;
        let mut out = Vec::new();
        for ifname in self.interface_names(node) {
            let napis = self.thread_napi(node, &ifname)?;
            let mut list = Vec::new();
            for n in napis {
                let Some(pid) = n.pid else { continue };
                let cpu = cpus[k % cpus.len()];
                k += 1;
                placement::pin(pid, &[cpu])
                    .map_err(|e| format!("{node}:{ifname}: NAPI thread {pid} to CPU {cpu}: {e}"))?;
                list.push(json!({"napi_id": n.id, "pid": pid, "cpu": cpu}));
            }
            out.push(json!({"interface": ifname, "napi": list}));
        }
        Ok(json!(out))
    }

    /// Moves the receive work of every interface of a node into NAPI threads of their own
    /// (unpinned) and returns their PIDs: what a bench counts as that node's kernel work
    /// (a switch's bridging, for one). Interfaces without NAPI add none.
    pub fn napi_threads(&self, node: &str) -> Result<Vec<i32>, String> {
        let mut pids = Vec::new();
        for ifname in self.interface_names(node) {
            pids.extend(
                self.thread_napi(node, &ifname)?
                    .iter()
                    .filter_map(|n| n.pid),
            );
        }
        Ok(pids)
    }

    /// Moves the receive work of `node:ifname` into NAPI threads of its own (`threaded`,
    /// written in the node's namespace, where `/sys` is its own) and returns its NAPI
    /// instances as the namespace's `netdev` netlink family reports them. An interface
    /// without NAPI (a veth with neither XDP nor GRO) refuses the write and has none.
    pub fn thread_napi(&self, node: &str, ifname: &str) -> Result<Vec<placement::Napi>, String> {
        let ns = self.ns(node);
        let _ = cmd::in_ns(
            &ns,
            "sh",
            &["-c", &format!("echo 1 > /sys/class/net/{ifname}/threaded")],
        );
        placement::in_namespace(&ns, || placement::napis(ifname))
            .map_err(|e| format!("{node}:{ifname}: NAPI: {e}"))
    }

    /// Where a node's work runs, as `lab show` reports it: its `cpus`, the threads of its
    /// process (an element's) with the CPUs each may use and last ran on, and per
    /// interface its NAPI threads with theirs (none: its receive work runs on the sender's
    /// CPU).
    pub(crate) fn placement_of(&self, node: &str, pid: Option<i32>) -> Value {
        let ns = self.ns(node);
        let mut ifaces = serde_json::Map::new();
        for ifname in self.interface_names(node) {
            let napis =
                placement::in_namespace(&ns, || placement::napis(&ifname)).unwrap_or_default();
            let list: Vec<Value> = napis
                .iter()
                .map(|n| match n.pid.and_then(|p| placement::thread_place(p, p)) {
                    Some(t) => json!({"napi_id": n.id, "pid": t.tid, "cpus": CpuList::of(&t.allowed).to_string(), "last_cpu": t.last_cpu}),
                    None => json!({"napi_id": n.id, "pid": null, "threaded": false}),
                })
                .collect();
            ifaces.insert(ifname, json!(list));
        }
        let threads: Vec<Value> = pid
            .filter(|&p| cmd::alive(p))
            .map(placement::process_threads)
            .unwrap_or_default()
            .into_iter()
            .map(|t| json!({"tid": t.tid, "name": t.name, "cpus": CpuList::of(&t.allowed).to_string(), "last_cpu": t.last_cpu}))
            .collect();
        json!({
            "cpus": self.cpus(node).map(|c| c.to_string()),
            "threads": threads,
            "napi": ifaces,
        })
    }
}
