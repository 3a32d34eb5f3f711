//! `tessera check --config FILE`: parses and validates a configuration as the element that
//! would run it does, without touching an interface, and says what is wrong with the file,
//! line and key (as `nginx -t` or `bird -p` do). A lab topology is checked whole: the
//! topology, then every element configuration it names, each with its role.

use anyhow::{bail, Result};
use serde_json::{json, Value};
use std::path::Path;

/// The roles `check` knows, as `--role` takes them.
pub const ROLES: [&str; 6] = [
    "forwarder",
    "balancer",
    "controller",
    "switch",
    "axon",
    "lab",
];

/// The role a file is written for, read from its tables: a lab topology has `[[link]]`s or
/// `[[host]]`s; an LB, `[balance]` or a `[[backend]]` list; a controller, `[controller]`;
/// a switch, `[switch]`; an Axon, `[axon]`; anything else is a forwarder's (a back-end's
/// has a `[backend]` table). A file TOML cannot read is given to the forwarder's reader,
/// whose error names the line.
pub fn role_of(src: &str) -> &'static str {
    let Ok(v) = src.parse::<toml::Table>() else {
        return "forwarder";
    };
    if v.contains_key("link") || v.contains_key("host") {
        "lab"
    } else if v.contains_key("balance") || v.get("backend").is_some_and(|b| b.is_array()) {
        "balancer"
    } else if v.contains_key("controller") {
        "controller"
    } else if v.contains_key("switch") {
        "switch"
    } else if v.contains_key("axon") {
        "axon"
    } else {
        "forwarder"
    }
}

/// Checks one element configuration for `role`; what it holds, in a line.
fn element(path: &Path, role: &str) -> Result<String> {
    Ok(match role {
        // The kernel as a contender reads a forwarder's file.
        "forwarder" | "linux" => {
            let c = control::ForwarderFile::load(path)?;
            let kind = if c.backend.is_some() {
                "back-end"
            } else if c.star.is_some() {
                "star member"
            } else {
                "forwarder"
            };
            format!(
                "{kind}: {} interfaces, {} routes, {} IPv6 routes{}",
                c.interfaces.len(),
                c.routes.len(),
                c.routes6.len(),
                c.routes_file
                    .as_ref()
                    .map(|f| format!(", routes file {}", f.display()))
                    .unwrap_or_default()
            )
        }
        "balancer" => {
            let c = control::balancer::BalancerFile::load(path)?;
            format!("LB: {} interfaces", c.interfaces.len())
        }
        "controller" => {
            control::vcp::ControllerFile::load(path)?;
            "controller".into()
        }
        "switch" => {
            let c = control::switch::SwitchFile::load(path)?;
            format!("switch: {} ports", c.cfg.ports.len())
        }
        "axon" => {
            let c = control::axon::AxonFile::load(path)?;
            format!("Axon: {} ports", c.cfg.ports.len())
        }
        other => bail!("--role {other:?}: use one of {}", ROLES.join(", ")),
    })
}

/// `tessera check`: the report (file, role, what it holds; for a lab, each element's),
/// or the first error.
pub fn run(path: &Path, role: Option<&str>) -> Result<Value> {
    let src =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let role = match role {
        Some(r) if ROLES.contains(&r) => ROLES.iter().find(|x| **x == r).copied().unwrap_or(r),
        Some(r) => bail!("--role {r:?}: use one of {}", ROLES.join(", ")),
        None => role_of(&src),
    };
    if role != "lab" {
        let what = element(path, role)?;
        return Ok(json!({"file": path, "role": role, "ok": true, "summary": what}));
    }
    // A lab: the topology (names, roles, links, cpus), then each element's file.
    let l = lab::Lab::load(path, None, "tessera".into()).map_err(anyhow::Error::msg)?;
    let mut elements = Vec::new();
    for e in &l.topo.element {
        if e.role == "external" {
            continue;
        }
        let file = l.dir.join(&e.config);
        let what = element(&file, &e.role)
            .map_err(|err| anyhow::anyhow!("element {} ({}): {err:#}", e.name, e.role))?;
        elements.push(json!({"element": e.name, "role": e.role, "file": file, "summary": what}));
    }
    Ok(json!({"file": path, "role": "lab", "ok": true,
        "summary": format!("lab {}: {} hosts, {} elements, {} switches, {} links", l.name,
            l.topo.host.len(), l.topo.element.len(), l.topo.switch.len(), l.topo.link.len()),
        "elements": elements}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_role_from_the_tables() {
        assert_eq!(role_of("[[interface]]\nname = \"a\"\n"), "forwarder");
        assert_eq!(role_of("[backend]\ninternal = \"r1-int\"\n"), "forwarder");
        assert_eq!(
            role_of("[[backend]]\nmac = \"02:00:00:00:01:01\"\n"),
            "balancer"
        );
        assert_eq!(role_of("[balance]\nmode = \"maglev\"\n"), "balancer");
        assert_eq!(role_of("[controller]\n"), "controller");
        assert_eq!(role_of("[switch]\n"), "switch");
        assert_eq!(role_of("[axon]\n"), "axon");
        assert_eq!(role_of("name = \"x\"\n[[link]]\na = \"h:eth0\"\n"), "lab");
        assert_eq!(role_of("this is [ not toml"), "forwarder");
    }
}
