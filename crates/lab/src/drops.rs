//! Where a lab lost frames between its nodes: every interface's transmit drops.
//!
//! On a veth, `tx_dropped` counts the frames its peer's ring could not take (256 frames),
//! those an XDP program redirected into it included, which no element sees otherwise. A
//! bench reads them before and after a point ([`Lab::tx_dropped`], [`grown`]) to say at
//! which hop a router of several elements lost what it lost.

use crate::cmd::ip_n;
use crate::topology::Lab;
use serde_json::Value;
use std::collections::BTreeMap;

impl Lab {
    /// The transmit drops of every interface of the lab's nodes (hosts, elements,
    /// switches), keyed `node:ifname`. A node whose namespace cannot be read is left out.
    pub fn tx_dropped(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for (node, _) in self.nodes() {
            for (ifname, stats) in counters(&self.ns(node)) {
                if let Some(d) = stats["tx"]["dropped"].as_u64() {
                    m.insert(format!("{node}:{ifname}"), d);
                }
            }
        }
        m
    }
}

/// Every interface but `lo` of namespace `ns` with its kernel counters (`stats64` of `ip
/// -s -j link show`: `rx` and `tx`, each with `dropped`, `errors` and more); none if the
/// namespace cannot be read.
pub fn counters(ns: &str) -> Vec<(String, Value)> {
    ip_n(ns, &["-j", "-s", "link", "show"])
        .map(|out| parse(&out))
        .unwrap_or_default()
}

/// Each interface but `lo` in `ip -j -s link show`'s output, with its `stats64`.
fn parse(out: &str) -> Vec<(String, Value)> {
    let v: Value = serde_json::from_str(out).unwrap_or(Value::Null);
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| {
            let name = i["ifname"].as_str()?;
            (name != "lo").then(|| (name.to_string(), i["stats64"].clone()))
        })
        .collect()
}

/// What grew from `before` to `after`, the interfaces that dropped nothing left out.
pub fn grown(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .filter_map(|(k, &a)| {
            let d = a.saturating_sub(before.get(k).copied().unwrap_or(0));
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interfaces_transmit_drops_are_read_and_compared() {
        let out = r#"[{"ifindex":1,"ifname":"lo","stats64":{"rx":{"dropped":0},"tx":{"dropped":7}}},
            {"ifindex":2,"ifname":"eth0","stats64":{"rx":{"dropped":3},"tx":{"dropped":40}}},
            {"ifindex":3,"ifname":"eth1","stats64":{"rx":{"dropped":0},"tx":{"dropped":5}}},
            {"ifindex":4,"ifname":"eth2"}]"#;
        let read = parse(out);
        assert_eq!(read.len(), 3, "{read:?}");
        let before: BTreeMap<String, u64> = read
            .iter()
            .filter_map(|(n, s)| Some((format!("lb1:{n}"), s["tx"]["dropped"].as_u64()?)))
            .collect();
        assert_eq!(
            before,
            BTreeMap::from([("lb1:eth0".into(), 40), ("lb1:eth1".into(), 5)])
        );
        assert_eq!(read[0].1["rx"]["dropped"], 3);
        let mut after = before.clone();
        after.insert("lb1:eth0".into(), 52);
        after.insert("h2:eth0".into(), 1);
        assert_eq!(
            grown(&before, &after),
            BTreeMap::from([("h2:eth0".into(), 1), ("lb1:eth0".into(), 12)])
        );
        assert!(parse("not json").is_empty());
    }
}
