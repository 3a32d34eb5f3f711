//! What an element's filters did, as `tessera show acl` tells it (and `/metrics`, from
//! this answer: `metrics::filter_lines`): every list with its rules as the config writes
//! them and their counts (user space's and the fast path's together), and per interface its
//! lists, its reverse-path mode and its drops.

use dataplane::acl::{FilterShare, Filters, Net, Rule};
use serde_json::{json, Value};

/// A rule as its `[[acl.rule]]` writes it, on one line.
pub fn rule_text(r: &Rule) -> String {
    let mut s = vec![format!("action = {:?}", r.action.as_str())];
    if let Some(p) = r.protocol {
        s.push(format!("protocol = {p}"));
    }
    let net = |n: &Net| match n {
        Net::V4(p) => format!("{}/{}", p.addr(), p.len()),
        Net::V6(p) => format!("{}/{}", p.addr(), p.len()),
    };
    if let Some(n) = &r.src {
        s.push(format!("src = {:?}", net(n)));
    }
    if let Some(n) = &r.dst {
        s.push(format!("dst = {:?}", net(n)));
    }
    let ports = |(a, b): (u16, u16)| {
        if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        }
    };
    if let Some(p) = r.src_port {
        s.push(format!("src_port = {:?}", ports(p)));
    }
    if let Some(p) = r.dst_port {
        s.push(format!("dst_port = {:?}", ports(p)));
    }
    if let Some(t) = r.icmp_type {
        s.push(format!("icmp_type = {t}"));
    }
    if let Some(c) = r.icmp_code {
        s.push(format!("icmp_code = {c}"));
    }
    if let Some((mask, value)) = r.tcp_flags {
        s.push(format!(
            "tcp_flags = {:?}",
            dataplane::acl::tcp_flags_text(mask, value)
        ));
    }
    if let Some(d) = r.dscp {
        s.push(format!("dscp = {d}"));
    }
    if let Some(f) = r.fragment {
        s.push(format!("fragment = {f}"));
    }
    s.join(", ")
}

/// `show acl`: `f`'s lists and interfaces, with the fast path's counts of them added where
/// there is one (`crate::fast::ForwarderFast::filter_counts`, `LbFast::filter_counts`).
pub fn show(f: &Filters, fast: Option<crate::fast::FilterCounts>) -> Value {
    let (fast_rules, fast_ifaces) = fast.unwrap_or_default();
    let lists: Vec<Value> = f
        .lists
        .iter()
        .enumerate()
        .map(|(li, l)| {
            let count = |i: usize| {
                let (p, b) = l.counts[i].get();
                let (fp, fb) = fast_rules
                    .get(li)
                    .and_then(|c| c.get(i))
                    .copied()
                    .unwrap_or_default();
                (p + fp, b + fb)
            };
            let rules: Vec<Value> = l
                .acl
                .rules
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let (p, b) = count(i);
                    json!({ "rule": i, "match": rule_text(r), "action": r.action.as_str(), "packets": p, "bytes": b })
                })
                .collect();
            let (p, b) = count(l.acl.rules.len());
            let tuples = f
                .compile(0, 0)
                .ok()
                .and_then(|t| t.lists.get(li).map(|x| x.count));
            json!({
                "name": l.acl.name,
                "default": { "action": l.acl.default.as_str(), "packets": p, "bytes": b },
                "rules": rules,
                "fast_path_tuples": tuples,
            })
        })
        .collect();
    let name = |i: Option<usize>| i.and_then(|i| f.lists.get(i)).map(|l| l.acl.name.clone());
    let ifaces: Vec<Value> = f
        .names
        .iter()
        .zip(&f.bindings)
        .enumerate()
        .filter(|(_, (_, b))| b.is_set())
        .map(|(i, (n, b))| {
            let d = &f.drops[i];
            let fd = fast_ifaces.get(i).copied().unwrap_or_default();
            json!({
                "name": n,
                "acl_in": name(b.acl_in),
                "acl_out": name(b.acl_out),
                "urpf": b.urpf.as_str(),
                "urpf_allow_default": b.urpf_allow_default,
                "denied_in": d.acl_in.get().0 + fd[0].0,
                "denied_out": d.acl_out.get().0 + fd[1].0,
                "urpf_dropped": d.urpf.get().0 + fd[2].0,
            })
        })
        .collect();
    json!({ "version": f.version, "lists": lists, "interfaces": ifaces })
}

/// `view` with `show acl`'s answer on its element (for `/metrics`) wherever the element has
/// filters; `counts` gives the fast path's counts of the filters in use, if it runs.
pub fn view_with(
    view: crate::metrics::Source,
    share: FilterShare,
    counts: impl Fn(&Filters) -> Option<crate::fast::FilterCounts> + Send + Sync + 'static,
) -> crate::metrics::Source {
    std::sync::Arc::new(move || {
        let mut v = view();
        let fl = share.load();
        if let (Some(e), false) = (v.first_mut(), fl.lists.is_empty() && !fl.any()) {
            e.filters = Some(show(&fl, counts(&fl)));
        }
        v
    })
}
