//! The LB's control-socket commands as its control thread answers them (config, reload,
//! counters, interfaces; the rest asked of the first worker).

use super::*;

/// What the LB's control thread answers commands from: its config, workers, fast path
/// and metrics.
pub(super) struct LbControl {
    /// The config file, for `reload` and SIGHUP (None: nothing to reload), and its text
    /// as this LB started from it, for `reload` to compare with.
    pub(super) config: Option<PathBuf>,
    pub(super) started_text: Option<String>,
    /// The config as the LB runs it (the last one a reload applied; `[io]` as the command
    /// line left it), for `config`.
    pub(super) running: Arc<Mutex<Option<BalancerFile>>>,
    pub(super) io: crate::config::IoConfig,
    /// Asks the first worker (balance, rules, back-ends, captures).
    pub(super) asker: Asker,
    pub(super) counters: Arc<dataplane::Counters>,
    /// Every worker's counters.
    pub(super) all_counters: Vec<Arc<dataplane::Counters>>,
    pub(super) metrics: Arc<crate::metrics::MetricsSlot>,
    pub(super) view: crate::metrics::Source,
    /// The fast path's maps, port names and ports' egress, where it runs.
    pub(super) fast_view: Option<FastView>,
    /// Per port name, why its program does not carry the fast path.
    pub(super) fast_off: std::collections::HashMap<String, String>,
    /// Per port running the fast path's program: its facts and attachment.
    pub(super) programs: Vec<(
        io::fastpath::lb::LbProgramFacts,
        Arc<io::xsk::AttachedShared>,
    )>,
    /// The external ports' filters the workers apply (a reload swaps them).
    pub(super) filters: dataplane::acl::FilterShare,
    /// The router's filters from the controller, merged again on a reload.
    pub(super) held: crate::remote_filters::HeldShare,
}

/// Makes the filters of the LB's file `running` merged with the router's `set` the
/// workers' (crate::remote_filters::install): whether they changed.
pub(super) fn apply_filters(
    running: &Mutex<Option<BalancerFile>>,
    share: &dataplane::acl::FilterShare,
    set: Option<&crate::config::RouterFilters>,
) -> Result<bool, String> {
    let local = running
        .lock()
        .map_err(|_| "poisoned")?
        .as_ref()
        .map(BalancerFile::local_filters)
        .unwrap_or_default();
    crate::remote_filters::install(&local, share, set, None)
}

/// The fast path's maps, its ports' names and whether each port's device takes frames
/// redirected in XDP.
pub(super) type FastView = (
    Arc<io::fastpath::lb::LbFastPath>,
    Vec<String>,
    Arc<std::sync::OnceLock<io::egress::EgressWatch>>,
);

impl LbControl {
    /// Answers command `cmd` with its request `req`.
    pub(super) fn handle(&self, cmd: &str, req: &Value) -> Result<Value, String> {
        match cmd {
            "config" => match self.running.lock().map_err(|_| "poisoned")?.as_ref() {
                Some(f) => Ok(json!({ "toml": f.shown() })),
                None => Err("this LB runs without a config file".into()),
            },
        // Re-reads the config file: the back-ends and their weights change in
        // place (the table rebuilt, the fast path's state published again); any
        // other change is refused with its key; a file that does not load changes
        // nothing and says why (file, line, key).
        "reload" => {
            let Some(path) = self.config.as_ref() else {
                return Err("no configuration to reload from".into());
            };
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            let f = BalancerFile::load(path).map_err(|e| format!("{e}; nothing changed"))?;
            if let Some(key) = self.started_text
                .as_deref()
                .and_then(|old| crate::run::changed_key_outside(old, &text, &RELOADABLE))
                .or_else(|| self.metrics.refused(&f.metrics).map(str::to_string))
            {
                return Err(format!(
                    "{}: key `{key}` changed, which needs a restart (a reload changes the back-ends and their weights, [[backend]], the rules, [[rule]], the filters, [[acl]] and the interfaces' acl_in and acl_out, and [metrics] listen); nothing changed",
                    path.display()
                ));
            }
            // The filters with the router's from the controller, merged before anything
            // changes (a list of the file that clashes with the router's changes nothing).
            let held = self.held.lock().map_err(|_| "poisoned")?;
            let old_filters = self.filters.load();
            let filters = crate::remote_filters::merged(
                &f.local_filters(),
                held.set.as_ref(),
                Some(&old_filters),
            )
            .map_err(|e| format!("{}: {e}; nothing changed", path.display()))?;
            // The rules: the programs with the new ones loaded first (the
            // verifier's refusal changes nothing), then user space's, then each
            // port's program replaced in one step.
            let rules = dataplane::balancer::order_rules(f.cfg.rules.clone());
            let old_rules = self.running
                .lock()
                .map_err(|_| "poisoned")?
                .as_ref()
                .map(|r| dataplane::balancer::order_rules(r.cfg.rules.clone()));
            let rules_changed = old_rules.as_ref() != Some(&rules);
            if rules_changed {
                let mut next = Vec::new();
                if let Some((fp, _, _)) = &self.fast_view {
                    for (facts, att) in &self.programs {
                        let facts = crate::lbfast::LbFast::with_rules(facts, &rules);
                        let code = |hook: io::xsk::Hook| match hook {
                            io::xsk::Hook::Xdp(xsk) => fp.program(&facts, xsk),
                            io::xsk::Hook::Tc => Err(io::xsk::xdp_only()),
                        };
                        let prog = att.load(&code).map_err(|e| {
                            format!("{}: the rules' program for port {}: {e}; nothing changed", path.display(), facts.port)
                        })?;
                        next.push((att, prog));
                    }
                }
                let v = ask_worker(&self.asker, "set-rules", &json!({ "rules": rules }))?;
                if let Some(e) = v["error"].as_str() {
                    return Err(format!("{}: {e}; nothing changed", path.display()));
                }
                for (att, prog) in &next {
                    att.replace(prog).map_err(|e| {
                        format!("{}: rules changed in user space, a port's program not replaced: {e}", path.display())
                    })?;
                }
                tracing::info!(rules = rules.len(), programs = next.len(), "classifier rules replaced");
            }
            // The filters, swapped whole (the fast path rewrites its maps at the first
            // worker's next pass).
            let filters_changed = filters.differs(&old_filters);
            if filters_changed {
                self.filters.store(filters);
                tracing::info!(lists = f.acls.len(), "filters reloaded");
            }
            let entries: Vec<Value> = f
                .backends
                .iter()
                .map(|(m, p, w)| json!([m.to_string(), p, w]))
                .collect();
            let v = ask_worker(&self.asker, "set-backends", &json!({ "entries": entries }))?;
            if let Err(e) = self.metrics.reload(&f.metrics) {
                return Err(format!("{}: back-ends reloaded; [metrics] not moved: {e}", path.display()));
            }
            if let Ok(mut r) = self.running.lock() {
                *r = Some(BalancerFile { io: self.io, ..f });
            }
            tracing::info!(file = %path.display(), backends = entries.len(), "config reloaded");
            Ok(json!({"reloaded": true, "rules_changed": rules_changed, "filters_changed": filters_changed, "balance": v}))
        }
        "counters" => {
            let mut v = crate::run::workers_counters(&self.all_counters)?;
            if let Some((fp, names, _)) = &self.fast_view {
                v["fast_path"] = crate::lbfast::LbFast::counters(fp, names);
            }
            Ok(v)
        }
        "interfaces" => {
            let mut v = ask_worker(&self.asker, cmd, req)?;
            crate::fast::decorate_interfaces(
                &mut v,
                |n| {
                    if let Some(why) = self.fast_off.get(n) {
                        return Some(crate::fast::PortFast::Off(why.clone()));
                    }
                    let (fp, names, egress) = self.fast_view.as_ref()?;
                    crate::lbfast::LbFast::port_fast(fp, names, egress.get(), n)
                },
                "[io] fast_path = false",
            );
            Ok(v)
        }
        "acl" => {
            let f = self.filters.load();
            let counts = self.fast_view.as_ref().map(|(fp, _, _)| crate::lbfast::LbFast::filter_counts(fp, &f));
            let mut v = crate::filters::show(&f, counts);
            v["from_controller"] = self.held.lock().map_err(|_| "poisoned")?.json();
            Ok(v)
        }
        "describe" => serde_json::to_value(dataplane::counters::descriptions_for(self.counters.role))
            .map_err(|e| e.to_string()),
        "router" => Ok(crate::metrics::router_json(&(self.view)())),
        "balance" | "rules" | "capture-start" | "capture-stop" => {
            ask_worker(&self.asker, cmd, req)
        }
        other => Err(format!(
            "unknown command {other:?}; try counters, describe, router, interfaces, balance, rules, reload, config"
        )),
    }
    }
}
