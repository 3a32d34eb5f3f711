//! The variants of the fast-path forwarder that `bench forward` measures beside it: with
//! an access list of N rules (`--acl-rules`), exporting flows sampled 1 in N
//! (`--flow-export`). Each is the single router's lab with its config changed.

use super::*;

/// The contenders of `--acl-rules N`: the fast-path forwarder (AF_XDP) with an access
/// list of N rules on its sources' ports, every one of which the traffic walks (the last
/// permits), named `forwarder-fast-acl-N`.
pub const ACL_PREFIX: &str = "forwarder-fast-acl-";

/// The number of rules of an `--acl-rules` contender.
pub fn acl_rules_of(contender: &str) -> Option<usize> {
    contender.strip_prefix(ACL_PREFIX)?.parse().ok()
}

/// The contenders of `--flow-export N`: the fast-path forwarder (AF_XDP) exporting flows
/// sampled 1 in N (docs/flows.md) to a collector on its loopback where nothing listens
/// (the records are lost, counted: the cost measured is the sampling's and the cache's),
/// named `forwarder-fast-flows-N`.
pub const FLOWS_PREFIX: &str = "forwarder-fast-flows-";

/// The sampling interval of a `--flow-export` contender.
pub fn flow_sampling_of(contender: &str) -> Option<u32> {
    contender.strip_prefix(FLOWS_PREFIX)?.parse().ok()
}

/// The single router of table `key` with the fast path and `[flow_export]` sampling 1 in
/// `n`: its lab file.
pub(super) fn flows_topo(out: &Path, key: &str, n: u32) -> Result<PathBuf, String> {
    let base = std::fs::read_to_string(out.join(format!("r-fast-{key}.toml")))
        .map_err(|e| format!("r-fast-{key}.toml: {e}"))?;
    let text = format!(
        "{base}
[flow_export]
collector = \"127.0.0.1:9995\"\nsampling = {n}\n"
    );
    let r = format!("r-flows-{n}-{key}.toml");
    write(&out.join(&r), &text)?;
    let lab = std::fs::read_to_string(out.join(format!("lab-fast-{key}.toml")))
        .map_err(|e| format!("lab-fast-{key}.toml: {e}"))?;
    let topo = out.join(format!("lab-flows-{n}-{key}.toml"));
    write(&topo, &lab.replace(&format!("r-fast-{key}.toml"), &r))?;
    Ok(topo)
}

/// The single router of table `key` with the fast path and, on r-eth0 and r-eth1 (the
/// sources' ports), `acl_in` = a list of `n` rules: its lab file.
pub(super) fn acl_topo(out: &Path, key: &str, n: usize, masks: usize) -> Result<PathBuf, String> {
    let base = std::fs::read_to_string(out.join(format!("r-fast-{key}.toml")))
        .map_err(|e| format!("r-fast-{key}.toml: {e}"))?;
    let mut text = String::new();
    for line in base.lines() {
        text.push_str(line);
        text.push('\n');
        if line == "name = \"r-eth0\"" || line == "name = \"r-eth1\"" {
            text.push_str("acl_in = \"measure\"\n");
        }
    }
    let list = dataplane::acl::tss::measurement_list(n, masks);
    text.push_str("\n[[acl]]\nname = \"measure\"\ndefault = \"deny\"\n");
    for r in &list.rules {
        text.push_str("\n[[acl.rule]]\n");
        text.push_str(&format!("action = \"{}\"\n", r.action.as_str()));
        if let Some(p) = r.protocol {
            text.push_str(&format!("protocol = {p}\n"));
        }
        if let Some(dataplane::acl::Net::V4(d)) = r.dst {
            text.push_str(&format!("dst = \"{}/{}\"\n", d.addr(), d.len()));
        }
        if let Some((a, _)) = r.dst_port {
            text.push_str(&format!("dst_port = \"{a}\"\n"));
        }
    }
    let r = format!("r-acl-{n}-{key}.toml");
    write(&out.join(&r), &text)?;
    let lab = std::fs::read_to_string(out.join(format!("lab-fast-{key}.toml")))
        .map_err(|e| format!("lab-fast-{key}.toml: {e}"))?;
    let topo = out.join(format!("lab-acl-{n}-{key}.toml"));
    write(&topo, &lab.replace(&format!("r-fast-{key}.toml"), &r))?;
    Ok(topo)
}
