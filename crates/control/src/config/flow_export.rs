//! `[flow_export]` of a forwarder's file (docs/flows.md): where flows go, at what rate,
//! with which timeouts; every error names the line and key.

use super::*;
use std::net::SocketAddr;
use std::time::Duration;

/// `[flow_export]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFlowExport {
    collector: Spanned<String>,
    sampling: Option<Spanned<i64>>,
    active_timeout_s: Option<Spanned<i64>>,
    idle_timeout_s: Option<Spanned<i64>>,
    observation_domain: Option<Spanned<i64>>,
    template_interval_s: Option<Spanned<i64>>,
}

/// `[flow_export]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowExportConfig {
    pub collector: SocketAddr,
    pub sampling: u32,
    pub active_timeout: Duration,
    pub idle_timeout: Duration,
    pub observation_domain: u32,
    /// How often the templates go again (they go on start and to a new collector too): a
    /// collector that starts after the exporter reads records from then on.
    pub template_interval: Duration,
}

impl RawFlowExport {
    pub(crate) fn check(&self, path: &Path, src: &str) -> Result<FlowExportConfig, ConfigError> {
        let err = |at: usize, key: &str, message: String| ConfigError {
            file: path.into(),
            line: line_of(src, at),
            key: format!("flow_export.{key}"),
            message,
        };
        let collector = self.collector.get_ref().parse().map_err(|_| {
            err(
                self.collector.span().start,
                "collector",
                format!(
                    "{:?} is not ADDR:PORT (e.g. \"10.9.0.10:4739\" or \"[2001:db8::9]:4739\")",
                    self.collector.get_ref()
                ),
            )
        })?;
        let num = |v: &Option<Spanned<i64>>, key: &str, min: i64, max: i64, dflt: i64| match v {
            None => Ok(dflt),
            Some(n) if (min..=max).contains(n.get_ref()) => Ok(*n.get_ref()),
            Some(n) => Err(err(
                n.span().start,
                key,
                format!("{} is not {min} to {max}", n.get_ref()),
            )),
        };
        Ok(FlowExportConfig {
            collector,
            sampling: num(&self.sampling, "sampling", 1, 1 << 24, 1000)? as u32,
            active_timeout: Duration::from_secs(num(
                &self.active_timeout_s,
                "active_timeout_s",
                1,
                3600,
                60,
            )? as u64),
            idle_timeout: Duration::from_secs(num(
                &self.idle_timeout_s,
                "idle_timeout_s",
                1,
                3600,
                15,
            )? as u64),
            observation_domain: num(
                &self.observation_domain,
                "observation_domain",
                0,
                u32::MAX as i64,
                1,
            )? as u32,
            template_interval: Duration::from_secs(num(
                &self.template_interval_s,
                "template_interval_s",
                1,
                3600,
                30,
            )? as u64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_table_is_refused_naming_its_line_and_key() {
        let parse = |s: &str| -> Result<FlowExportConfig, ConfigError> {
            #[derive(Deserialize)]
            struct F {
                flow_export: RawFlowExport,
            }
            let f: F = toml::from_str(s).unwrap();
            f.flow_export.check(Path::new("r.toml"), s)
        };
        let ok = parse("[flow_export]\ncollector = \"10.9.0.10:4739\"\nsampling = 100\n").unwrap();
        assert_eq!((ok.sampling, ok.idle_timeout.as_secs()), (100, 15));
        let e = parse("[flow_export]\ncollector = \"10.9.0.10\"\n").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (2, "flow_export.collector"));
        let e = parse("[flow_export]\ncollector = \"10.9.0.10:4739\"\nsampling = 0\n").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (3, "flow_export.sampling"));
    }
}
