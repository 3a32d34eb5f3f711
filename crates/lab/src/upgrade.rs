//! `tessera lab upgrade FILE`: every element of a running lab restarted in turn, in the
//! order that loses the least, by the binary that runs the command (so that a new
//! binary's `lab upgrade` upgrades the lab to it): each back-end drained on the active
//! controller (`tessera drain`: out of the LBs' tables until idle), restarted, and undrained
//! once it holds the controller's table; each standalone forwarder restarted (its XDP
//! fast path handed over to its next start); the controllers, standbys first, each back
//! before the next; then each LB; then switches and Axons. Each step is reported: what
//! was done, how long it took, what the element said.
//!
//! The same procedure on real machines is in docs/operate.md ("Restarting and upgrading
//! without losing a packet").

use crate::topology::Lab;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

fn ask(lab: &Lab, node: &str, req: Value) -> Result<Value, String> {
    control::ctlsock::request_with(&lab.control_socket(node), req)
}

/// Waits until `f` holds (every 20 ms), at most `limit`; how long it took.
fn wait(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Result<Duration, String> {
    let t = Instant::now();
    while !f() {
        if t.elapsed() > limit {
            return Err(format!("{what}: not within {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(t.elapsed())
}

/// The controller `node`'s election role (`active`, `standby`, ...), if it answers.
fn controller_role(lab: &Lab, node: &str) -> Option<String> {
    let v = ask(lab, node, json!({"cmd": "fib"})).ok()?;
    v["election"]["role"].as_str().map(str::to_string)
}

/// Stops `node` and starts it again; the milliseconds it took.
fn restart(lab: &Lab, node: &str) -> Result<u64, String> {
    let t = Instant::now();
    lab.stop(node)?;
    lab.start(node)?;
    Ok(t.elapsed().as_millis() as u64)
}

/// The kinds of element [`upgrade`] restarts, in its order.
pub const KINDS: [&str; 6] = [
    "back-end",
    "forwarder",
    "controller",
    "balancer",
    "switch",
    "axon",
];

/// Back-end `name` drained on the active controller `ctl`, restarted, and undrained once
/// it holds the controller's table again: the step's record.
fn drained_restart(lab: &Lab, name: &str, ctl: &str) -> Result<Value, String> {
    let t = Instant::now();
    let drain = json!({"cmd": "drain", "element": name});
    let drained = wait(
        &format!("{name} idle after its drain"),
        Duration::from_secs(30),
        || ask(lab, ctl, drain.clone()).is_ok_and(|v| v["state"] == "idle"),
    )?;
    let restarted_ms = restart(lab, name)?;
    let table = wait(
        &format!("{name} holding the controller's table after its start"),
        Duration::from_secs(30),
        || {
            let (Ok(own), Ok(c)) = (
                ask(lab, name, json!({"cmd": "fib"})),
                ask(lab, ctl, json!({"cmd": "fib"})),
            ) else {
                return false;
            };
            own["epoch"] == c["epoch"] && own["digest"] == c["digest"]
        },
    )?;
    ask(lab, ctl, json!({"cmd": "undrain", "element": name}))?;
    Ok(json!({
        "element": name, "role": "back-end", "done": "drained, restarted, undrained",
        "drain_ms": drained.as_millis() as u64, "restart_ms": restarted_ms,
        "table_ms": table.as_millis() as u64, "total_ms": t.elapsed().as_millis() as u64,
    }))
}

/// Restarts every element of `lab` in turn (see the module's documentation), or those of
/// the kinds or names in `only` ([`KINDS`], element names; empty: all), in the same order;
/// `say` hears each step as it ends. Returns the steps.
pub fn upgrade(lab: &Lab, only: &[String], say: &mut dyn FnMut(&str)) -> Result<Value, String> {
    let procs = lab.processes();
    if let Some(k) = only
        .iter()
        .find(|k| !KINDS.contains(&k.as_str()) && !procs.iter().any(|(n, _, _)| n == *k))
    {
        return Err(format!(
            "{k:?} is no kind of element ({}) nor an element of this lab",
            KINDS.join(", ")
        ));
    }
    // An element of kind `k` named `name`: restarted?
    let want = |k: &str, name: &str| only.is_empty() || only.iter().any(|o| o == k || o == name);
    let has_backend = |cfg: &std::path::Path| {
        std::fs::read_to_string(cfg)
            .map(|t| t.lines().any(|l| l.trim() == "[backend]"))
            .unwrap_or(false)
    };
    let of = |role: &str| -> Vec<String> {
        procs
            .iter()
            .filter(|(_, r, _)| r == role)
            .map(|(n, _, _)| n.clone())
            .collect()
    };
    let controllers = of("controller");
    let active = controllers
        .iter()
        .find(|c| controller_role(lab, c).as_deref() == Some("active"))
        .cloned();
    let mut steps = Vec::new();
    let mut record = |v: Value, say: &mut dyn FnMut(&str)| {
        say(&v.to_string());
        steps.push(v);
    };

    // Back-ends: drained, restarted, undrained when they hold the table again.
    for (name, _, cfg) in procs
        .iter()
        .filter(|(n, r, c)| want("back-end", n) && r == "forwarder" && has_backend(c))
    {
        // A lab without controllers: nothing to drain on; the back-end's fast path is
        // handed over to its next start, as a standalone forwarder's.
        if controllers.is_empty() {
            let ms = restart(lab, name)?;
            record(
                json!({"element": name, "role": "back-end",
                    "done": "restarted (no controller to drain it on: its fast path handed over)",
                    "restart_ms": ms}),
                say,
            );
            continue;
        }
        let ctl = active.as_deref().ok_or_else(|| {
            format!("back-end {name}: no active controller answers to drain it on")
        })?;
        let _ = cfg;
        record(drained_restart(lab, name, ctl)?, say);
    }
    // Standalone forwarders: their fast path is handed over to the next start.
    for (name, _, _) in procs
        .iter()
        .filter(|(n, r, c)| want("forwarder", n) && r == "forwarder" && !has_backend(c))
    {
        let ms = restart(lab, name)?;
        let taken = ask(lab, name, json!({"cmd": "counters"}))
            .map(|v| v["fast_path"]["taken_over"].is_object())
            .unwrap_or(false);
        record(
            json!({"element": name, "role": "forwarder", "done": "restarted",
                "restart_ms": ms, "fast_path_taken_over": taken}),
            say,
        );
    }
    // Controllers: standbys first; each answers as a controller again before the next.
    let mut order: Vec<&String> = controllers
        .iter()
        .filter(|c| Some(*c) != active.as_ref())
        .collect();
    order.extend(active.iter());
    order.retain(|c| want("controller", c));
    for name in order {
        let before = controller_role(lab, name);
        let ms = restart(lab, name)?;
        let back = wait(
            &format!("controller {name} in the election again"),
            Duration::from_secs(30),
            || controller_role(lab, name).is_some_and(|r| r == "active" || r == "standby"),
        )?;
        // After the active one: the standby took over, or it came back active itself.
        let now_active = controllers
            .iter()
            .find(|c| controller_role(lab, c).as_deref() == Some("active"))
            .cloned();
        record(
            json!({"element": name, "role": "controller", "done": "restarted",
                "was": before, "is": controller_role(lab, name), "restart_ms": ms,
                "in_election_ms": back.as_millis() as u64, "active_now": now_active}),
            say,
        );
    }
    // LBs: each restarted; it runs again once it answers. Of a spare pair, the standby
    // first, and the next only once the pair has one active LB and each hears the other.
    let spare = |name: &str| {
        ask(lab, name, json!({"cmd": "balance"}))
            .ok()
            .map(|v| v["spare"].clone())
    };
    let mut lbs: Vec<String> = of("balancer")
        .into_iter()
        .filter(|n| want("balancer", n))
        .collect();
    lbs.sort_by_key(|n| spare(n).is_some_and(|s| s["role"] == "active"));
    for name in lbs {
        let was = spare(&name)
            .filter(|s| !s.is_null())
            .map(|s| s["role"].clone());
        let ms = restart(lab, &name)?;
        let mut step =
            json!({"element": name, "role": "balancer", "done": "restarted", "restart_ms": ms});
        if was.is_some() {
            let settled = wait(
                &format!("{name} and its spare: one active, each hearing the other"),
                Duration::from_secs(30),
                || {
                    spare(&name).is_some_and(|s| {
                        s["peer_heard_ms"].as_u64().is_some_and(|h| h < 500)
                            && (s["role"] == "active") != (s["peer_active"] == true)
                    })
                },
            )?;
            step["spare"] = json!({"was": was, "is": spare(&name).map(|s| s["role"].clone()),
                "settled_ms": settled.as_millis() as u64});
        }
        record(step, say);
    }
    for role in ["switch", "axon"] {
        for name in of(role).into_iter().filter(|n| want(role, n)) {
            let ms = restart(lab, &name)?;
            record(
                json!({"element": name, "role": role, "done": "restarted", "restart_ms": ms}),
                say,
            );
        }
    }
    Ok(json!({"lab": lab.name, "steps": steps}))
}
