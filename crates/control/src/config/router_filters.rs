//! The multistage router's filters (docs/filters.md, "In the multistage router"): written
//! once in the controller's file against the router's external interfaces, each named by
//! the VLAN of its network on the interconnection (`vlan10`, as the controller's TAPs and
//! IPv6 gateways name them), and sent to the elements over DIST as the text
//! [`RouterFilters::text`] writes, which [`RouterFilters::parse`] reads back.
//!
//! ```toml
//! [[acl]]                       # as in any element's file
//! name = "edge-in"
//! [[acl.rule]]
//! action = "deny"
//! dst_port = "22"
//!
//! [[interface]]                 # one of the router's external interfaces
//! name = "vlan10"               # its network: VLAN 10
//! acl_in = "edge-in"            # run by the LB of that network, before balancing
//! acl_out = "edge-out"          # run by that LB on what leaves by it
//! urpf = "strict"               # run by every back-end (it holds the routes)
//! urpf_allow_default = false
//! ```

use super::filters::RawAcl;
use super::*;
use dataplane::acl::{Acl, Urpf};

/// One of the router's external interfaces as written in the controller's file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRouterInterface {
    name: Spanned<String>,
    acl_in: Option<Spanned<String>>,
    acl_out: Option<Spanned<String>>,
    urpf: Option<Spanned<String>>,
    urpf_allow_default: Option<Spanned<bool>>,
}

/// The text of a set: its lists and its interfaces.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSet {
    #[serde(default)]
    acl: Vec<RawAcl>,
    #[serde(default)]
    interface: Vec<RawRouterInterface>,
}

/// The router's filters: lists, and what each external interface (by VLAN id) applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterFilters {
    pub acls: Vec<Acl>,
    pub interfaces: Vec<(u16, FilterConfig)>,
}

/// The VLAN id of an external interface's name, `vlanN` (N from 1 to 4094).
pub fn vlan_of_name(name: &str) -> Option<u16> {
    let n: u16 = name.strip_prefix("vlan")?.parse().ok()?;
    (1..4095).contains(&n).then_some(n)
}

impl At<'_> {
    /// The router's filters of a controller's file (or a set's text): `acl` and
    /// `interface` as written.
    pub(crate) fn router_filters(
        &self,
        acl: &[RawAcl],
        interface: &[RawRouterInterface],
    ) -> Result<RouterFilters, ConfigError> {
        let acls = self.acls(acl)?;
        let mut interfaces: Vec<(u16, FilterConfig)> = Vec::new();
        for (i, r) in interface.iter().enumerate() {
            let Some(vlan) = vlan_of_name(r.name.get_ref()) else {
                return Err(self.err(
                    r.name.span().start,
                    format!("interface[{i}].name"),
                    format!(
                        "{:?}: name one of the router's external interfaces by the VLAN of its network, \"vlan10\" (1 to 4094)",
                        r.name.get_ref()
                    ),
                ));
            };
            if interfaces.iter().any(|(v, _)| *v == vlan) {
                return Err(self.err(
                    r.name.span().start,
                    format!("interface[{i}].name"),
                    format!("{:?} is listed twice", r.name.get_ref()),
                ));
            }
            let f = self.filter_keys(
                [r.acl_in.as_ref(), r.acl_out.as_ref()],
                r.urpf.as_ref(),
                r.urpf_allow_default.as_ref(),
                i,
                &acls,
            )?;
            interfaces.push((vlan, f));
        }
        Ok(RouterFilters { acls, interfaces })
    }
}

impl RouterFilters {
    /// A set's text (or a file of only `[[acl]]` and `[[interface]]`), `path` naming it
    /// in errors.
    pub fn parse(path: &Path, src: &str) -> Result<RouterFilters, ConfigError> {
        let raw: RawSet = from_toml(path, src)?;
        At { path, src }.router_filters(&raw.acl, &raw.interface)
    }

    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.acls.is_empty()
            && self
                .interfaces
                .iter()
                .all(|(_, f)| *f == FilterConfig::default())
    }

    /// What the LBs run: the lists, and each interface's `acl_in` and `acl_out`.
    pub fn for_balancers(&self) -> RouterFilters {
        let interfaces: Vec<(u16, FilterConfig)> = self
            .interfaces
            .iter()
            .map(|(v, f)| {
                let f = FilterConfig {
                    acl_in: f.acl_in.clone(),
                    acl_out: f.acl_out.clone(),
                    ..Default::default()
                };
                (*v, f)
            })
            .filter(|(_, f)| *f != FilterConfig::default())
            .collect();
        RouterFilters {
            acls: self.acls.clone(),
            interfaces,
        }
    }

    /// What the back-ends run: each interface's reverse-path check (no lists).
    pub fn for_backends(&self) -> RouterFilters {
        let interfaces = self
            .interfaces
            .iter()
            .filter(|(_, f)| f.urpf != Urpf::Off)
            .map(|(v, f)| {
                let f = FilterConfig {
                    urpf: f.urpf,
                    urpf_allow_default: f.urpf_allow_default,
                    ..Default::default()
                };
                (*v, f)
            })
            .collect();
        RouterFilters {
            acls: Vec::new(),
            interfaces,
        }
    }

    /// The tables `[[acl]]` and `[[interface]]` of a file.
    pub(crate) fn tables(&self, t: &mut toml::Table) {
        if !self.acls.is_empty() {
            t.insert("acl".into(), crate::showconfig::acls(&self.acls));
        }
        if !self.interfaces.is_empty() {
            let ifaces = self
                .interfaces
                .iter()
                .map(|(v, f)| {
                    let mut e = toml::Table::new();
                    e.insert("name".into(), crate::showconfig::s(format!("vlan{v}")));
                    crate::showconfig::filter_keys(&mut e, f);
                    toml::Value::Table(e)
                })
                .collect();
            t.insert("interface".into(), toml::Value::Array(ifaces));
        }
    }

    /// The set as text: what the controller sends and the elements parse.
    pub fn text(&self) -> String {
        let mut t = toml::Table::new();
        self.tables(&mut t);
        toml::to_string(&t).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SET: &str = r#"
[[acl]]
name = "edge-in"
default = "permit"

[[acl.rule]]
action = "deny"
protocol = "tcp"
dst = "10.2.0.0/24"
dst_port = "22-23"

[[acl.rule]]
action = "reject"
src = "2001:db8::/32"

[[interface]]
name = "vlan10"
acl_in = "edge-in"
urpf = "strict"

[[interface]]
name = "vlan20"
urpf = "loose"
urpf_allow_default = true
"#;

    #[test]
    fn a_set_reads_back_from_its_text_and_splits_by_role() {
        let f = RouterFilters::parse(Path::new("vcp.toml"), SET).unwrap();
        assert_eq!(f.acls.len(), 1);
        assert_eq!(f.interfaces.len(), 2);
        let again = RouterFilters::parse(Path::new("set"), &f.text()).unwrap();
        assert_eq!(again, f);
        let lb = f.for_balancers();
        assert_eq!(lb.acls, f.acls);
        assert_eq!(lb.interfaces.len(), 1);
        assert_eq!(lb.interfaces[0].1.urpf, Urpf::Off);
        let be = f.for_backends();
        assert!(be.acls.is_empty());
        assert_eq!(be.interfaces.len(), 2);
        assert!(be.interfaces.iter().all(|(_, c)| c.acl_in.is_none()));
        assert!(RouterFilters::default().is_empty());
        assert_eq!(
            RouterFilters::parse(Path::new("set"), "").unwrap(),
            RouterFilters::default()
        );
    }

    #[test]
    fn a_bad_set_is_refused_naming_line_and_key() {
        for (bad, line, key) in [
            (
                SET.replace("\"vlan20\"", "\"ext-b\""),
                22,
                "interface[1].name",
            ),
            (
                SET.replace("\"vlan20\"", "\"vlan10\""),
                22,
                "interface[1].name",
            ),
            (
                SET.replace("\"vlan20\"", "\"vlan4095\""),
                22,
                "interface[1].name",
            ),
            (
                SET.replace("acl_in = \"edge-in\"", "acl_in = \"nope\""),
                18,
                "interface[0].acl_in",
            ),
            (
                SET.replace("urpf = \"loose\"", "urpf = \"lax\""),
                23,
                "interface[1].urpf",
            ),
        ] {
            let e = RouterFilters::parse(Path::new("vcp.toml"), &bad).unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (line, key), "{e}");
        }
    }
}
