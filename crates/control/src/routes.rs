//! Route files: one `PREFIX NEXTHOP [NEXTHOP...]` per line (several next hops make an ECMP
//! route; `#` comments and blank lines allowed). A line's prefix says its family: IPv6
//! prefixes take IPv6 next hops.

use fib::{Prefix, Prefix6};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// One route of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    V4(Prefix, &'a [Ipv4Addr]),
    V6(Prefix6, &'a [Ipv6Addr]),
}

/// A line that is not a route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteFileError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for RouteFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for RouteFileError {}

/// Parses route-file text of IPv4 routes, calling `each(prefix, next_hops, line)` per
/// route; an IPv6 route is an error.
pub fn parse(
    file: &str,
    text: &str,
    mut each: impl FnMut(Prefix, &[Ipv4Addr], usize) -> Result<(), String>,
) -> Result<usize, RouteFileError> {
    parse_lines(file, text, |l, n| match l {
        Line::V4(p, hops) => each(p, hops, n),
        Line::V6(p, _) => Err(format!(
            "{p}: an IPv6 route, where only IPv4 routes are taken"
        )),
    })
}

/// Parses route-file text of either family, calling `each(route, line)` per route.
pub fn parse_lines(
    file: &str,
    text: &str,
    mut each: impl FnMut(Line, usize) -> Result<(), String>,
) -> Result<usize, RouteFileError> {
    let mut hops = Vec::with_capacity(4);
    let mut hops6 = Vec::new();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let err = |message: String| RouteFileError {
            file: file.to_string(),
            line: i + 1,
            message,
        };
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let p = words.next().unwrap_or("");
        let expected = || {
            err(format!(
                "expected \"PREFIX NEXTHOP [NEXTHOP...]\", got {line:?}"
            ))
        };
        if p.contains(':') {
            next_hops(words, &mut hops6, "IPv6").map_err(err)?;
            if hops6.is_empty() {
                return Err(expected());
            }
            let prefix = Prefix6::parse_strict(p).map_err(|e| err(format!("prefix {p:?}: {e}")))?;
            each(Line::V6(prefix, &hops6), i + 1).map_err(err)?;
            n += 1;
            continue;
        }
        next_hops(words, &mut hops, "IPv4").map_err(err)?;
        if hops.is_empty() {
            return Err(expected());
        }
        let prefix = Prefix::parse_strict(p).map_err(|e| err(format!("prefix {p:?}: {e}")))?;
        each(Line::V4(prefix, &hops), i + 1).map_err(err)?;
        n += 1;
    }
    Ok(n)
}

/// Parses `words` as next hops of one family into `out`.
fn next_hops<'a, A: std::str::FromStr>(
    words: impl Iterator<Item = &'a str>,
    out: &mut Vec<A>,
    family: &str,
) -> Result<(), String> {
    out.clear();
    for h in words {
        out.push(
            h.parse()
                .map_err(|_| format!("next hop {h:?} is not an {family} address"))?,
        );
    }
    Ok(())
}

/// Reads a route file of IPv4 routes from disk.
pub fn load(
    path: &Path,
    each: impl FnMut(Prefix, &[Ipv4Addr], usize) -> Result<(), String>,
) -> Result<usize, RouteFileError> {
    let (name, text) = read(path)?;
    parse(&name, &text, each)
}

/// Reads a route file of either family from disk.
pub fn load_lines(
    path: &Path,
    each: impl FnMut(Line, usize) -> Result<(), String>,
) -> Result<usize, RouteFileError> {
    let (name, text) = read(path)?;
    parse_lines(&name, &text, each)
}

fn read(path: &Path) -> Result<(String, String), RouteFileError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| RouteFileError {
        file: name.clone(),
        line: 0,
        message: format!("cannot read: {e}"),
    })?;
    Ok((name, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_reports_lines() {
        let mut got = Vec::new();
        let text = "# table\n198.51.100.0/24 10.2.0.2\n\n10.0.0.0/8   10.2.0.3 10.2.0.4 # x\n";
        let n = parse("r.txt", text, |p, h, l| {
            got.push((p.to_string(), h.to_vec(), l));
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 2);
        let ecmp = vec![Ipv4Addr::new(10, 2, 0, 3), Ipv4Addr::new(10, 2, 0, 4)];
        assert_eq!(got[1], ("10.0.0.0/8".to_string(), ecmp, 4));
        let e = parse("r.txt", "10.0.0.0/8 10.2.0.2\n10.0.0.0/8\n", |_, _, _| {
            Ok(())
        })
        .unwrap_err();
        assert_eq!(
            (e.line, e.to_string().starts_with("r.txt:2: expected")),
            (2, true)
        );
        let e = parse("r.txt", "10.0.0.1/8 10.2.0.2\n", |_, _, _| Ok(())).unwrap_err();
        assert!(e.message.contains("host bits"), "{e}");
        let e = parse("r.txt", "10.0.0.0/8 10.2.0.2 x\n", |_, _, _| Ok(())).unwrap_err();
        assert!(e.message.contains("\"x\" is not an IPv4"), "{e}");
        let e = parse("r.txt", "10.0.0.0/8 10.2.0.2\n", |_, _, _| Err("no".into())).unwrap_err();
        assert_eq!(e.to_string(), "r.txt:1: no");
    }

    #[test]
    fn ipv6_lines_take_ipv6_next_hops() {
        let text =
            "2001:db8::/32 2001:db8:2::2\n10.0.0.0/8 10.2.0.2\n2001:db8:9::/48 fe80::1 fe80::2\n";
        let mut got = Vec::new();
        let n = parse_lines("r.txt", text, |l, n| {
            got.push(match l {
                Line::V4(p, h) => format!("{n} {p} {h:?}"),
                Line::V6(p, h) => format!("{n} {p} {h:?}"),
            });
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            got,
            [
                "1 2001:db8::/32 [2001:db8:2::2]",
                "2 10.0.0.0/8 [10.2.0.2]",
                "3 2001:db8:9::/48 [fe80::1, fe80::2]"
            ]
        );
        let e = parse_lines("r.txt", "2001:db8::/32 10.2.0.2\n", |_, _| Ok(())).unwrap_err();
        assert!(e.message.contains("\"10.2.0.2\" is not an IPv6"), "{e}");
        let e = parse_lines("r.txt", "2001:db8::1/32 2001:db8::2\n", |_, _| Ok(())).unwrap_err();
        assert!(e.message.contains("prefix"), "{e}");
        // The IPv4 reader refuses IPv6 routes, naming the line.
        let e = parse("r.txt", text, |_, _, _| Ok(())).unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("IPv6 route"), "{e}");
    }
}
