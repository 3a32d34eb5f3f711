//! An element's side of the router's filters (docs/filters.md, "In the multistage
//! router"): the sets the controller sends, put together by the first worker
//! ([`dataplane::acl::remote`]), are parsed here ([`RouterFilters::parse`]), merged with
//! the element's own filters ([`merged`]) and applied; the answer (applied, or refused and
//! why) goes back to the controller. A reload of the element's file merges the set it
//! holds again.

use crate::config::{FilterConfig, RouterFilters};
use dataplane::acl::remote::FilterControl;
use dataplane::acl::{Acl, Filters};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wire::dist::{ack_reason, FiltersAck, FiltersStatus};

/// One interface of the element as its file sets it, and the router's external network it
/// stands for (a back-end's sub-interface, an LB's external port: by VLAN id).
#[derive(Debug, Clone)]
pub struct LocalIface {
    pub name: String,
    pub filter: FilterConfig,
    pub vlan: Option<u16>,
}

/// The element's own filters: its file's lists and interfaces.
#[derive(Debug, Clone, Default)]
pub struct Local {
    pub acls: Vec<Acl>,
    pub ifaces: Vec<LocalIface>,
}

impl Local {
    /// A forwarder's (a back-end's sub-interfaces face the router's networks).
    pub fn of_forwarder(f: &crate::config::ForwarderFile) -> Local {
        Local {
            acls: f.acls.clone(),
            ifaces: f
                .interfaces
                .iter()
                .map(|i| LocalIface {
                    name: i.name.clone(),
                    filter: i.filter.clone(),
                    vlan: i.vlan.map(|(_, v)| v),
                })
                .collect(),
        }
    }
}

/// The element's filters: its own and the router's set `remote`, keeping the counters of
/// `previous`. Refused (and nothing changes) where a list of the set has the name of one
/// of the element's, or the set binds an interface that has filters of its own.
pub fn merged(
    local: &Local,
    remote: Option<&RouterFilters>,
    previous: Option<&Filters>,
) -> Result<Filters, String> {
    let mut acls = local.acls.clone();
    let mut bound: Vec<FilterConfig> = local.ifaces.iter().map(|i| i.filter.clone()).collect();
    if let Some(r) = remote {
        for a in &r.acls {
            if acls.iter().any(|x| x.name == a.name) {
                return Err(format!(
                    "the router's access list {:?} has the name of one of this element's own",
                    a.name
                ));
            }
            acls.push(a.clone());
        }
        for (vlan, f) in &r.interfaces {
            for (i, l) in local.ifaces.iter().enumerate() {
                if l.vlan != Some(*vlan) {
                    continue;
                }
                if l.filter != FilterConfig::default() {
                    return Err(format!(
                        "interface {} (vlan{vlan}) has filters of its own in this element's file",
                        l.name
                    ));
                }
                bound[i] = f.clone();
            }
        }
    }
    let names: Vec<&String> = local.ifaces.iter().map(|i| &i.name).collect();
    Ok(crate::config::filters_of(
        &acls,
        names.into_iter().zip(bound.iter()),
        previous,
    ))
}

/// Installs `local` merged with the router's `set` ([`merged`]) as the workers' filters
/// (`share`), checked for the fast path `fast` first and written there where it runs (an
/// LB's fast path rewrites its maps itself, at its first worker's next pass): whether they
/// changed. An error changes nothing.
pub fn install(
    local: &Local,
    share: &dataplane::acl::FilterShare,
    set: Option<&RouterFilters>,
    fast: Option<&crate::fast::ForwarderFast>,
) -> Result<bool, String> {
    let old = share.load();
    let f = merged(local, set, Some(&old))?;
    if let Some(fl) = fast {
        fl.check_filters(&f)?;
    }
    if !f.differs(&old) {
        return Ok(false);
    }
    if let Some(fl) = fast {
        fl.set_filters(&f, Some(&old))?;
    }
    share.store(f);
    Ok(true)
}

/// The set an element holds from the controller, and its last answer.
#[derive(Debug, Default)]
pub struct Held {
    pub set: Option<RouterFilters>,
    pub answer: Option<(wire::MacAddr, FiltersAck)>,
}

/// Shared between the thread that applies sets and the element's reload.
pub type HeldShare = Arc<Mutex<Held>>;

impl Held {
    /// What `show acl` says of it.
    pub fn json(&self) -> Value {
        match &self.answer {
            None => json!(null),
            Some((from, a)) => json!({
                "controller": from.to_string(),
                "version": a.version,
                "digest": format!("{:016x}", a.digest),
                "status": match a.status {
                    FiltersStatus::Applied => "applied",
                    FiltersStatus::Refused => "refused",
                },
                "reason": (!a.reason.is_empty()).then_some(&a.reason),
                "lists": self.set.as_ref().map_or(0, |s| s.acls.len()),
                "interfaces": self.set.as_ref().map(|s| s.interfaces.iter().map(|(v, _)| format!("vlan{v}")).collect::<Vec<_>>()),
            }),
        }
    }
}

/// Applies the sets that come on `ctl` with `apply` (which merges the set with the
/// element's own filters and installs them, or says why not) until `stop`; answers each.
pub fn serve(
    ctl: FilterControl,
    held: HeldShare,
    apply: impl Fn(Option<&RouterFilters>) -> Result<(), String> + Send + 'static,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("filters".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(set) = ctl.sets.recv_timeout(Duration::from_millis(200)) else {
                    continue;
                };
                let name = format!("the controller's filters, version {}", set.version);
                let parsed = std::str::from_utf8(&set.text)
                    .map_err(|_| "the set is not UTF-8".to_string())
                    .and_then(|t| {
                        RouterFilters::parse(std::path::Path::new(&name), t)
                            .map_err(|e| e.to_string())
                    });
                // Held while applied: a reload of the element's file waits for it.
                let Ok(mut h) = held.lock() else { return };
                let result = parsed.and_then(|f| apply(Some(&f)).map(|()| f));
                let (status, reason) = match result {
                    Ok(f) => {
                        tracing::info!(version = set.version, lists = f.acls.len(), interfaces = f.interfaces.len(), "the router's filters applied");
                        h.set = Some(f);
                        (FiltersStatus::Applied, String::new())
                    }
                    Err(e) => {
                        tracing::warn!(version = set.version, error = %e, "the router's filters refused");
                        (FiltersStatus::Refused, ack_reason(&e))
                    }
                };
                let ack = FiltersAck {
                    version: set.version,
                    digest: set.digest,
                    incarnation: 0,
                    status,
                    reason,
                };
                h.answer = Some((set.from, ack.clone()));
                drop(h);
                if ctl.answers.send((set.from, ack)).is_err() {
                    return;
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn local() -> Local {
        let f = crate::config::ForwarderFile::parse(
            Path::new("r1.toml"),
            r#"
[[acl]]
name = "mine"
[[interface]]
name = "r1-int"
address = "10.255.0.11/24"
[[interface]]
name = "ext-a"
parent = "r1-int"
vlan = 10
address = "10.1.0.1/24"
[[interface]]
name = "ext-b"
parent = "r1-int"
vlan = 20
address = "10.2.0.1/24"
acl_in = "mine"
[backend]
internal = "r1-int"
"#,
        )
        .unwrap();
        Local::of_forwarder(&f)
    }

    #[test]
    fn the_routers_set_binds_by_vlan_and_never_overrides_an_elements_own() {
        let set = |s: &str| RouterFilters::parse(Path::new("set"), s).unwrap();
        let l = local();
        let f = merged(
            &l,
            Some(&set(
                "[[interface]]\nname = \"vlan10\"\nurpf = \"strict\"\n",
            )),
            None,
        )
        .unwrap();
        assert_eq!(f.bindings[1].urpf, dataplane::acl::Urpf::Strict);
        assert_eq!(f.bindings[2].acl_in, Some(0));
        // A network this element does not face: nothing bound, not refused.
        let f = merged(
            &l,
            Some(&set("[[interface]]\nname = \"vlan30\"\nurpf = \"loose\"\n")),
            None,
        )
        .unwrap();
        assert!(f
            .bindings
            .iter()
            .all(|b| b.urpf == dataplane::acl::Urpf::Off));
        // ext-b has its own list: refused, naming it.
        let e = merged(
            &l,
            Some(&set("[[interface]]\nname = \"vlan20\"\nurpf = \"loose\"\n")),
            None,
        )
        .unwrap_err();
        assert!(e.contains("ext-b"), "{e}");
        let e = merged(&l, Some(&set("[[acl]]\nname = \"mine\"\n")), None).unwrap_err();
        assert!(e.contains("mine"), "{e}");
        // No set: the element's own.
        assert_eq!(merged(&l, None, None).unwrap().lists.len(), 1);
    }
}
