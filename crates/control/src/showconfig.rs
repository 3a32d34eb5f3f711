//! `tessera show config --control SOCK`: the config an element runs with, every default
//! filled in, as TOML that loads again to the same config (unit tests
//! `a_forwarders_shown_config_loads_to_the_same`, `a_switchs_shown_config_loads_to_the_same`;
//! lab test `reload_and_sighup_reread_the_config`; an LB's is `BalancerFile::shown`).
//! Forwarders and switches here; an LB's is `BalancerFile::shown`, an Axon's
//! `AxonFile::shown`, a controller's `ControllerFile::shown`.
//! Secrets stay out: a DIST key is shown by its file.

use crate::config::{DistConfig, ForwarderFile, IoConfig};
use crate::metrics::MetricsConfig;
use toml::{Table, Value};

pub(crate) fn s(v: impl ToString) -> Value {
    Value::String(v.to_string())
}

pub(crate) fn int(v: impl TryInto<i64>) -> Value {
    Value::Integer(v.try_into().unwrap_or(i64::MAX))
}

pub(crate) fn list<T: ToString>(v: impl IntoIterator<Item = T>) -> Value {
    Value::Array(v.into_iter().map(s).collect())
}

/// `[io]`, every key.
fn io_table(io: &IoConfig) -> Table {
    let mut t = Table::new();
    t.insert("backend".into(), s(io.backend.name()));
    // Said (in the file or with --fast-path), it is shown; left to its default, it is a
    // comment, as a default that the element or a port cannot carry is off, where said
    // outright it would be an error.
    if io.fast_path_set {
        t.insert("fast_path".into(), Value::Boolean(io.fast_path));
    }
    t.insert("slow_path_limit".into(), int(io.slow_path_limit));
    t.insert("restart_grace_s".into(), int(io.restart_grace_s));
    t.insert(
        "packet_ring".into(),
        s(match io.packet_ring {
            io::RxRing::Frames => "frames",
            io::RxRing::Blocks => "blocks",
        }),
    );
    t.insert("busy_poll".into(), Value::Boolean(io.busy_poll));
    t.insert("shared_umem".into(), Value::Boolean(io.shared_umem));
    t.insert("workers".into(), int(io.workers));
    if let Some(p) = io.priority {
        t.insert("priority".into(), int(p));
    }
    if let Some(c) = &io.cpus {
        t.insert("cpus".into(), s(c));
    }
    t
}

/// `[dist]`: the key by its file (absolute), never the key.
fn dist_table(d: &DistConfig) -> Table {
    let mut t = Table::new();
    if let Some(k) = &d.key_file {
        t.insert("key_file".into(), s(k.display()));
    }
    t.insert("max_age_s".into(), int(d.max_age.as_secs()));
    t
}

/// `[metrics]`, if it says anything.
fn metrics_table(m: &MetricsConfig) -> Option<Table> {
    let mut t = Table::new();
    if let Some(l) = m.listen {
        t.insert("listen".into(), s(l));
    }
    if let Some(e) = &m.element {
        t.insert("element".into(), s(e));
    }
    (!t.is_empty()).then_some(t)
}

/// An interface's filter keys, where set.
pub(crate) fn filter_keys(e: &mut Table, f: &crate::config::FilterConfig) {
    if let Some(a) = &f.acl_in {
        e.insert("acl_in".into(), s(a));
    }
    if let Some(a) = &f.acl_out {
        e.insert("acl_out".into(), s(a));
    }
    if f.urpf != dataplane::acl::Urpf::Off {
        e.insert("urpf".into(), s(f.urpf.as_str()));
        e.insert(
            "urpf_allow_default".into(),
            Value::Boolean(f.urpf_allow_default),
        );
    }
}

/// `[[acl]]`, each rule with the keys it sets.
pub(crate) fn acls(lists: &[dataplane::acl::Acl]) -> Value {
    use dataplane::acl::Net;
    let net = |n: &Net| match n {
        Net::V4(p) => s(format!("{}/{}", p.addr(), p.len())),
        Net::V6(p) => s(format!("{}/{}", p.addr(), p.len())),
    };
    let ports = |(a, b): (u16, u16)| if a == b { s(a) } else { s(format!("{a}-{b}")) };
    Value::Array(
        lists
            .iter()
            .map(|l| {
                let mut t = Table::new();
                t.insert("name".into(), s(&l.name));
                t.insert("default".into(), s(l.default.as_str()));
                let rules = l
                    .rules
                    .iter()
                    .map(|r| {
                        let mut e = Table::new();
                        e.insert("action".into(), s(r.action.as_str()));
                        if let Some(p) = r.protocol {
                            e.insert("protocol".into(), int(p));
                        }
                        if let Some(n) = &r.src {
                            e.insert("src".into(), net(n));
                        }
                        if let Some(n) = &r.dst {
                            e.insert("dst".into(), net(n));
                        }
                        if let Some(p) = r.src_port {
                            e.insert("src_port".into(), ports(p));
                        }
                        if let Some(p) = r.dst_port {
                            e.insert("dst_port".into(), ports(p));
                        }
                        if let Some(v) = r.icmp_type {
                            e.insert("icmp_type".into(), int(v));
                        }
                        if let Some(v) = r.icmp_code {
                            e.insert("icmp_code".into(), int(v));
                        }
                        if let Some((m, v)) = r.tcp_flags {
                            e.insert("tcp_flags".into(), s(dataplane::acl::tcp_flags_text(m, v)));
                        }
                        if let Some(v) = r.dscp {
                            e.insert("dscp".into(), int(v));
                        }
                        if let Some(v) = r.fragment {
                            e.insert("fragment".into(), Value::Boolean(v));
                        }
                        Value::Table(e)
                    })
                    .collect();
                t.insert("rule".into(), Value::Array(rules));
                Value::Table(t)
            })
            .collect(),
    )
}

/// The `[flow_export]` table as `show config` writes it.
pub(crate) fn flow_export(fe: &crate::config::FlowExportConfig) -> Table {
    let mut t = Table::new();
    t.insert("collector".into(), s(fe.collector));
    t.insert("sampling".into(), int(fe.sampling));
    t.insert("active_timeout_s".into(), int(fe.active_timeout.as_secs()));
    t.insert("idle_timeout_s".into(), int(fe.idle_timeout.as_secs()));
    t.insert("observation_domain".into(), int(fe.observation_domain));
    t.insert(
        "template_interval_s".into(),
        int(fe.template_interval.as_secs()),
    );
    t
}

/// A forwarder's (or back-end's, or star member's) config.
pub fn forwarder(f: &ForwarderFile) -> String {
    let mut t = Table::new();
    if let Some(r) = &f.routes_file {
        t.insert("routes_file".into(), s(r.display()));
        let via: Vec<String> = f
            .routes_file_via
            .iter()
            .map(|a| a.to_string())
            .chain(f.routes_file_via6.iter().map(|a| a.to_string()))
            .collect();
        if !via.is_empty() {
            t.insert("routes_file_via".into(), list(via));
        }
    }
    let ifaces: Vec<Value> = f
        .interfaces
        .iter()
        .map(|i| {
            let mut e = Table::new();
            e.insert("name".into(), s(&i.name));
            e.insert("address".into(), list(i.addresses()));
            if let Some(m) = i.mtu {
                e.insert("mtu".into(), int(m));
            }
            if let Some((parent, vlan)) = i.vlan {
                e.insert("parent".into(), s(&f.interfaces[parent].name));
                e.insert("vlan".into(), int(vlan));
            }
            e.insert(
                "router_advertisements".into(),
                Value::Boolean(i.router_advertisements),
            );
            filter_keys(&mut e, &i.filter);
            Value::Table(e)
        })
        .collect();
    t.insert("interface".into(), Value::Array(ifaces));
    let routes: Vec<Value> = f
        .routes
        .iter()
        .map(|r| {
            let mut e = Table::new();
            e.insert("prefix".into(), s(r.prefix));
            e.insert("via".into(), list(&r.via));
            Value::Table(e)
        })
        .chain(f.routes6.iter().map(|r| {
            let mut e = Table::new();
            e.insert("prefix".into(), s(r.prefix));
            // A link-local gateway with its interface, as written: "fe80::2%r2-eth0".
            let via = r
                .via
                .iter()
                .map(|&a| match wire::ipv6::link_local_iface(a) {
                    Some((ll, i)) => {
                        let name = f.interfaces.get(i).map_or("?", |x| x.name.as_str());
                        format!("{ll}%{name}")
                    }
                    None => a.to_string(),
                });
            e.insert("via".into(), list(via));
            Value::Table(e)
        }))
        .collect();
    if !routes.is_empty() {
        t.insert("route".into(), Value::Array(routes));
    }
    if !f.acls.is_empty() {
        t.insert("acl".into(), acls(&f.acls));
    }
    if let Some(fe) = &f.flow_export {
        t.insert("flow_export".into(), Value::Table(flow_export(fe)));
    }
    if let Some(b) = &f.backend {
        let mut e = Table::new();
        e.insert("internal".into(), s(&f.interfaces[b.internal].name));
        e.insert("hello_interval_ms".into(), int(b.hello_interval_ms));
        t.insert("backend".into(), Value::Table(e));
    }
    if let Some(st) = &f.star {
        let mut e = Table::new();
        e.insert("internal".into(), s(&f.interfaces[st.internal].name));
        // One member per MAC, its networks in the order given.
        let mut macs: Vec<wire::MacAddr> = Vec::new();
        for m in st
            .members
            .iter()
            .map(|m| m.1)
            .chain(st.members6.iter().map(|m| m.1))
        {
            if !macs.contains(&m) {
                macs.push(m);
            }
        }
        let members: Vec<Value> = macs
            .iter()
            .map(|mac| {
                let nets: Vec<Value> = st
                    .members
                    .iter()
                    .filter(|m| m.1 == *mac)
                    .map(|m| (m.0.to_string(), m.2))
                    .chain(
                        st.members6
                            .iter()
                            .filter(|m| m.1 == *mac)
                            .map(|m| (m.0.to_string(), m.2)),
                    )
                    .map(|(p, port)| {
                        let mut n = Table::new();
                        n.insert("prefix".into(), s(p));
                        n.insert("port".into(), int(port));
                        Value::Table(n)
                    })
                    .collect();
                let mut m = Table::new();
                m.insert("mac".into(), s(mac));
                m.insert("networks".into(), Value::Array(nets));
                Value::Table(m)
            })
            .collect();
        e.insert("member".into(), Value::Array(members));
        t.insert("star".into(), Value::Table(e));
    }
    if let Ok(Value::Table(tuning)) = Value::try_from(f.tuning) {
        t.insert("tuning".into(), Value::Table(tuning));
    }
    finish(t, &f.io, Some(&f.dist), &f.metrics)
}

/// A switch's `[[port]]`s (an Axon's take the same keys).
pub(crate) fn ports(ports: &[dataplane::switch::PortConfig]) -> Value {
    Value::Array(
        ports
            .iter()
            .map(|p| {
                let mut e = Table::new();
                e.insert("name".into(), s(&p.name));
                if let Some(c) = p.capacity_bps {
                    e.insert("capacity_bps".into(), int(c));
                }
                e.insert("buffer_bytes".into(), int(p.buffer_bytes));
                if !p.delay.is_zero() {
                    e.insert("delay_ms".into(), Value::Float(p.delay.as_secs_f64() * 1e3));
                }
                Value::Table(e)
            })
            .collect(),
    )
}

/// A switch's config: its ports and mode (`cfg`), `[io]` and `[metrics]`.
pub fn switch(
    cfg: &dataplane::switch::SwitchConfig,
    io: &IoConfig,
    metrics: &MetricsConfig,
) -> String {
    let mut t = Table::new();
    let mut sw = Table::new();
    sw.insert(
        "mode".into(),
        s(match cfg.mode {
            dataplane::switch::Mode::Fifo => "fifo",
            dataplane::switch::Mode::Fair => "fair",
        }),
    );
    sw.insert("ageing_s".into(), int(cfg.ageing.as_secs()));
    t.insert("switch".into(), Value::Table(sw));
    t.insert("port".into(), ports(&cfg.ports));
    finish(t, io, None, metrics)
}

/// A config's text: `t`, then the tables every element shares (`[io]`, `[dist]` where
/// the element speaks DIST, `[metrics]` where set), with a line under `[io]` saying how
/// `fast_path` was left to its default.
pub(crate) fn finish(
    mut t: Table,
    io: &IoConfig,
    dist: Option<&DistConfig>,
    metrics: &MetricsConfig,
) -> String {
    t.insert("io".into(), Value::Table(io_table(io)));
    if let Some(d) = dist {
        t.insert("dist".into(), Value::Table(dist_table(d)));
    }
    if let Some(m) = metrics_table(metrics) {
        t.insert("metrics".into(), Value::Table(m));
    }
    let text = toml::to_string(&t).unwrap_or_default();
    if io.fast_path_set {
        return text;
    }
    text.replacen(
        "[io]\n",
        "[io]\n# fast_path: not set, so on wherever this element and each port can carry it (`tessera show interfaces` says where not)\n",
        1,
    )
}

/// For tests: `text` at `path` parsed, shown and parsed again is the same config; the
/// shown text.
#[cfg(test)]
pub(crate) fn assert_round_trip<T: std::fmt::Debug, E: std::fmt::Display>(
    path: &std::path::Path,
    text: &str,
    parse: impl Fn(&std::path::Path, &str) -> Result<T, E>,
    show: impl Fn(&T) -> String,
) -> String {
    let a = parse(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let shown = show(&a);
    let b = parse(path, &shown).unwrap_or_else(|e| panic!("{}: {e}\n{shown}", path.display()));
    assert_eq!(
        format!("{a:?}"),
        format!("{b:?}"),
        "{}:\n{shown}",
        path.display()
    );
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every forwarder config the project ships, shown and loaded again, is the same
    /// config (defaults and all); its text names every `[io]` key.
    #[test]
    fn a_forwarders_shown_config_loads_to_the_same() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let files = [
            "labs/single-router/r.toml",
            "labs/multistage/r1.toml",
            "labs/star/s1.toml",
            "labs/virtual-cp/r1.toml",
        ];
        for f in files {
            let path = root.join(f);
            let a = ForwarderFile::load(&path).unwrap_or_else(|e| panic!("{f}: {e}"));
            let shown = forwarder(&a);
            for key in ["backend", "slow_path_limit", "restart_grace_s", "workers"] {
                assert!(shown.contains(&format!("{key} = ")), "{f}: {key}: {shown}");
            }
            assert!(shown.contains("fast_path"), "{f}: {shown}");
            // Loaded from the same directory, as relative paths in it resolve there.
            let b =
                ForwarderFile::parse(&path, &shown).unwrap_or_else(|e| panic!("{f}: {e}\n{shown}"));
            let strip = |mut c: ForwarderFile| {
                for r in &mut c.routes {
                    r.line = 0;
                }
                for r in &mut c.routes6 {
                    r.line = 0;
                }
                format!("{c:?}")
            };
            assert_eq!(strip(a), strip(b), "{f}:\n{shown}");
        }
    }

    /// The same for the switches' configs.
    #[test]
    fn a_switchs_shown_config_loads_to_the_same() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for f in ["labs/switch/fair.toml", "labs/switch/fifo.toml"] {
            let path = root.join(f);
            let a = crate::switch::SwitchFile::load(&path).unwrap_or_else(|e| panic!("{f}: {e}"));
            let shown = switch(&a.cfg, &a.io, &a.metrics);
            assert!(
                shown.contains("buffer_bytes = ") && shown.contains("ageing_s = 300"),
                "{shown}"
            );
            let b = crate::switch::SwitchFile::parse(&path, &shown)
                .unwrap_or_else(|e| panic!("{f}: {e}\n{shown}"));
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{f}:\n{shown}");
        }
    }
}
