//! `[[acl]]` and the filter keys of `[[interface]]` (`acl_in`, `acl_out`, `urpf`,
//! `urpf_allow_default`), common to the elements that filter (docs/filters.md).
//!
//! ```toml
//! [[acl]]
//! name = "edge-in"
//! default = "permit"            # or "deny": what a packet that matches no rule gets
//!
//! [[acl.rule]]
//! action = "deny"               # "permit" | "deny" | "reject"
//! protocol = "tcp"              # name or number; absent: any
//! src = "0.0.0.0/0"             # prefix, IPv4 or IPv6; absent: any
//! dst = "10.2.0.0/24"
//! dst_port = "22"               # "N" or "A-B"; src_port likewise
//! # icmp_type = 8, icmp_code = 0, tcp_flags = "syn,!ack", dscp = 46, fragment = true
//! ```

use super::*;
use dataplane::acl::{self, Acl, Action, Binding, Net, Rule, Urpf};

/// One `[[acl]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAcl {
    name: Spanned<String>,
    default: Option<Spanned<String>>,
    #[serde(default)]
    rule: Vec<RawRule>,
}

/// One `[[acl.rule]]` as written. Ports may be written as a number too.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    action: Spanned<String>,
    protocol: Option<Spanned<NumOrText>>,
    src: Option<Spanned<String>>,
    dst: Option<Spanned<String>>,
    src_port: Option<Spanned<NumOrText>>,
    dst_port: Option<Spanned<NumOrText>>,
    icmp_type: Option<Spanned<i64>>,
    icmp_code: Option<Spanned<i64>>,
    tcp_flags: Option<Spanned<String>>,
    dscp: Option<Spanned<i64>>,
    fragment: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum NumOrText {
    Num(i64),
    Text(String),
}

impl NumOrText {
    fn text(&self) -> String {
        match self {
            NumOrText::Num(n) => n.to_string(),
            NumOrText::Text(t) => t.clone(),
        }
    }
}

/// An interface's filters by list name, as the config says them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterConfig {
    pub acl_in: Option<String>,
    pub acl_out: Option<String>,
    pub urpf: Urpf,
    pub urpf_allow_default: bool,
}

impl FilterConfig {
    /// The binding with list names made indexes into `lists`.
    pub fn binding(&self, lists: &[Acl]) -> Binding {
        let at = |n: &Option<String>| {
            n.as_ref()
                .and_then(|n| lists.iter().position(|l| &l.name == n))
        };
        Binding {
            acl_in: at(&self.acl_in),
            acl_out: at(&self.acl_out),
            urpf: self.urpf,
            urpf_allow_default: self.urpf_allow_default,
        }
    }
}

impl At<'_> {
    /// The `[[acl]]` tables: each rule checked, the names unique.
    pub(crate) fn acls(&self, raw: &[RawAcl]) -> Result<Vec<Acl>, ConfigError> {
        let mut out: Vec<Acl> = Vec::new();
        for (i, a) in raw.iter().enumerate() {
            let name = a.name.get_ref();
            let key = format!("acl[{i}].name");
            if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_control()) {
                return Err(self.err(
                    a.name.span().start,
                    key,
                    "use 1 to 64 printable characters".into(),
                ));
            }
            if out.iter().any(|x| &x.name == name) {
                return Err(self.err(
                    a.name.span().start,
                    key,
                    format!("access list {name:?} is defined twice"),
                ));
            }
            let default = match &a.default {
                None => Action::Permit,
                Some(d) => match Action::parse(d.get_ref()) {
                    Ok(Action::Reject) | Err(_) => {
                        return Err(self.err(
                            d.span().start,
                            format!("acl[{i}].default"),
                            format!("{:?}: \"permit\" or \"deny\"", d.get_ref()),
                        ))
                    }
                    Ok(a) => a,
                },
            };
            let rules = a
                .rule
                .iter()
                .enumerate()
                .map(|(j, r)| self.rule(r, &format!("acl[{i}].rule[{j}]")))
                .collect::<Result<_, _>>()?;
            out.push(Acl {
                name: name.clone(),
                default,
                rules,
            });
        }
        Ok(out)
    }

    fn rule(&self, r: &RawRule, key: &str) -> Result<Rule, ConfigError> {
        let field = |at: usize, f: &str, m: String| self.err(at, format!("{key}.{f}"), m);
        let action = Action::parse(r.action.get_ref())
            .map_err(|m| field(r.action.span().start, "action", m))?;
        let mut rule = Rule::any(action);
        if let Some(p) = &r.protocol {
            rule.protocol = Some(
                acl::parse_protocol(&p.get_ref().text())
                    .map_err(|m| field(p.span().start, "protocol", m))?,
            );
        }
        if let Some(s) = &r.src {
            rule.src = Some(Net::parse(s.get_ref()).map_err(|m| field(s.span().start, "src", m))?);
        }
        if let Some(s) = &r.dst {
            rule.dst = Some(Net::parse(s.get_ref()).map_err(|m| field(s.span().start, "dst", m))?);
        }
        if let Some(p) = &r.src_port {
            rule.src_port = Some(
                acl::parse_ports(&p.get_ref().text())
                    .map_err(|m| field(p.span().start, "src_port", m))?,
            );
        }
        if let Some(p) = &r.dst_port {
            rule.dst_port = Some(
                acl::parse_ports(&p.get_ref().text())
                    .map_err(|m| field(p.span().start, "dst_port", m))?,
            );
        }
        let byte = |v: &Spanned<i64>, f: &str, max: i64| -> Result<u8, ConfigError> {
            let n = *v.get_ref();
            if !(0..=max).contains(&n) {
                return Err(field(v.span().start, f, format!("{n} is not 0 to {max}")));
            }
            Ok(n as u8)
        };
        if let Some(v) = &r.icmp_type {
            rule.icmp_type = Some(byte(v, "icmp_type", 255)?);
        }
        if let Some(v) = &r.icmp_code {
            rule.icmp_code = Some(byte(v, "icmp_code", 255)?);
        }
        if let Some(v) = &r.dscp {
            rule.dscp = Some(byte(v, "dscp", 63)?);
        }
        if let Some(f) = &r.tcp_flags {
            rule.tcp_flags = Some(
                acl::parse_tcp_flags(f.get_ref())
                    .map_err(|m| field(f.span().start, "tcp_flags", m))?,
            );
        }
        rule.fragment = r.fragment.as_ref().map(|f| *f.get_ref());
        rule.check().map_err(|(f, m)| {
            // The line of the field the error names, else the rule's action.
            let at = match f {
                "dst" => r.dst.as_ref().map(|s| s.span().start),
                "src_port" => r.src_port.as_ref().map(|s| s.span().start),
                "dst_port" => r.dst_port.as_ref().map(|s| s.span().start),
                "tcp_flags" => r.tcp_flags.as_ref().map(|s| s.span().start),
                "icmp_type" => r.icmp_type.as_ref().map(|s| s.span().start),
                "icmp_code" => r.icmp_code.as_ref().map(|s| s.span().start),
                "dscp" => r.dscp.as_ref().map(|s| s.span().start),
                _ => None,
            }
            .unwrap_or(r.action.span().start);
            field(at, f, m)
        })?;
        Ok(rule)
    }

    /// Interface `i`'s filter keys, its lists among `acls`.
    pub(super) fn filter(
        &self,
        r: &RawInterface,
        i: usize,
        acls: &[Acl],
    ) -> Result<FilterConfig, ConfigError> {
        self.filter_keys(
            [r.acl_in.as_ref(), r.acl_out.as_ref()],
            r.urpf.as_ref(),
            r.urpf_allow_default.as_ref(),
            i,
            acls,
        )
    }

    /// Interface `i`'s filter keys as written (`acl_in`, `acl_out`; `urpf`,
    /// `urpf_allow_default`), its lists among `acls`.
    pub(crate) fn filter_keys(
        &self,
        lists: [Option<&Spanned<String>>; 2],
        urpf: Option<&Spanned<String>>,
        allow_default: Option<&Spanned<bool>>,
        i: usize,
        acls: &[Acl],
    ) -> Result<FilterConfig, ConfigError> {
        let list = |n: Option<&Spanned<String>>, k: &str| -> Result<Option<String>, ConfigError> {
            let Some(n) = n else { return Ok(None) };
            if !acls.iter().any(|a| &a.name == n.get_ref()) {
                return Err(self.err(
                    n.span().start,
                    format!("interface[{i}].{k}"),
                    format!("no [[acl]] is named {:?}", n.get_ref()),
                ));
            }
            Ok(Some(n.get_ref().clone()))
        };
        let urpf = match urpf {
            None => Urpf::Off,
            Some(u) => Urpf::parse(u.get_ref())
                .map_err(|m| self.err(u.span().start, format!("interface[{i}].urpf"), m))?,
        };
        Ok(FilterConfig {
            acl_in: list(lists[0], "acl_in")?,
            acl_out: list(lists[1], "acl_out")?,
            urpf,
            urpf_allow_default: allow_default.is_some_and(|b| *b.get_ref()),
        })
    }
}

/// The filters of a config's `acls` and its interfaces' (name, filter keys), keeping the
/// counters of `previous` where a rule or an interface is the same (a reload).
pub(crate) fn filters_of<'a>(
    acls: &[Acl],
    interfaces: impl Iterator<Item = (&'a String, &'a FilterConfig)>,
    previous: Option<&acl::Filters>,
) -> acl::Filters {
    let (names, bindings): (Vec<String>, Vec<Binding>) = interfaces
        .map(|(n, f)| (n.clone(), f.binding(acls)))
        .unzip();
    acl::Filters::new(acls.to_vec(), bindings, names, previous)
}

impl ForwarderFile {
    /// The filters this file configures, keeping the counters of `previous` where a rule
    /// or an interface is the same (a reload).
    pub fn filters(&self, previous: Option<&acl::Filters>) -> acl::Filters {
        let ifaces = self.interfaces.iter().map(|i| (&i.name, &i.filter));
        filters_of(&self.acls, ifaces, previous)
    }
}

/// The keys of an `[[interface]]` a reload changes in place.
pub(crate) const RELOADABLE_IN_INTERFACE: [&str; 4] =
    ["acl_in", "acl_out", "urpf", "urpf_allow_default"];
