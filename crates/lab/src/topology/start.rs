//! Starting a lab's elements: those of one group side by side.

use super::{Element, Lab, LAB_BPF_DIR};
use std::path::Path;

impl Lab {
    /// Starts the elements of `group` (each a `tessera` process) side by side, each waited
    /// for until it answers on its control socket: the PIDs of those that started, by
    /// name, and the first error. (One after another, a lab's start took about 0.3 s an
    /// element, most of it each element's own start: its tables, its programs' loading.)
    pub(super) fn start_group(&self, group: &[&Element]) -> (Vec<(String, i32)>, Option<String>) {
        // The BPF filesystem the elements pin under, mounted once before they start (each
        // start would otherwise race the others to mount it).
        if let Err(err) = io::pin::mount_bpffs(Path::new(LAB_BPF_DIR)) {
            eprintln!("lab: {err}: fast paths will not outlive their elements");
        }
        let results: Vec<(String, Result<i32, String>)> = std::thread::scope(|s| {
            let started: Vec<_> = group
                .iter()
                .map(|e| (e.name.clone(), s.spawn(|| self.start_element(e))))
                .collect();
            started
                .into_iter()
                .map(|(name, h)| {
                    let r = h
                        .join()
                        .unwrap_or_else(|_| Err(format!("element {name}: its start panicked")));
                    (name, r)
                })
                .collect()
        });
        let mut pids = Vec::new();
        let mut first = None;
        for (name, r) in results {
            match r {
                Ok(pid) => pids.push((name, pid)),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        (pids, first)
    }
}
