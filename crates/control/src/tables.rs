//! Route tables as users bring them: text (`PREFIX [NEXTHOP]`, more columns ignored) or MRT
//! RIB dumps (RFC 6396: TABLE_DUMP_V2 as RouteViews and RIPE RIS publish them, and the
//! older TABLE_DUMP), each plain, gzip- or bzip2-compressed. The format and compression
//! are recognised from the content, not the file name. IPv4 and IPv6 routes may share a
//! file: [`read`] takes the IPv4 ones, [`read6`] the IPv6 ones, [`read_routes`] both.

use fib::{Prefix, Prefix6};
use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

/// What a read found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Routes passed to the callback (of the family asked for).
    pub routes: usize,
    /// Records or lines that are not unicast routes of the family asked for (the other
    /// family, peer tables, comments).
    pub skipped: usize,
    pub mrt: bool,
}

/// One route of a table, with its next hop if the table gives one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    V4(Prefix, Option<Ipv4Addr>),
    V6(Prefix6, Option<Ipv6Addr>),
}

/// Opens `path`, undoing gzip or bzip2 compression.
pub fn open(path: &Path) -> Result<Box<dyn BufRead>, String> {
    let name = path.display().to_string();
    let mut f = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
    let mut magic = [0u8; 3];
    let n = f.read(&mut magic).map_err(|e| format!("{name}: {e}"))?;
    let f = std::fs::File::open(path).map_err(|e| format!("{name}: {e}"))?;
    Ok(match &magic[..n] {
        [0x1f, 0x8b, ..] => Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::read::MultiGzDecoder::new(f),
        )),
        [b'B', b'Z', b'h'] => Box::new(BufReader::with_capacity(
            1 << 16,
            bzip2::read::MultiBzDecoder::new(f),
        )),
        _ => Box::new(BufReader::with_capacity(1 << 16, f)),
    })
}

/// Reads a table, calling `each(prefix, next_hop)` per IPv4 route.
pub fn read(path: &Path, mut each: impl FnMut(Prefix, Option<Ipv4Addr>)) -> Result<Stats, String> {
    read_routes(path, |r| match r {
        Route::V4(p, h) => {
            each(p, h);
            true
        }
        Route::V6(..) => false,
    })
}

/// Reads a table, calling `each(prefix, next_hop)` per IPv6 route.
pub fn read6(
    path: &Path,
    mut each: impl FnMut(Prefix6, Option<Ipv6Addr>),
) -> Result<Stats, String> {
    read_routes(path, |r| match r {
        Route::V6(p, h) => {
            each(p, h);
            true
        }
        Route::V4(..) => false,
    })
}

/// Reads a table, calling `each` per route of either family; `each` says whether it took
/// the route (counted in `routes`) or not (counted in `skipped`).
pub fn read_routes(path: &Path, mut each: impl FnMut(Route) -> bool) -> Result<Stats, String> {
    let name = path.display().to_string();
    let mut r = open(path)?;
    let head = r.fill_buf().map_err(|e| format!("{name}: {e}"))?;
    if looks_like_mrt(head) {
        let mut st = mrt::read(&mut r, &mut each).map_err(|e| format!("{name}: {e}"))?;
        st.mrt = true;
        return Ok(st);
    }
    let mut st = Stats::default();
    for (i, line) in r.lines().enumerate() {
        let line = line.map_err(|e| format!("{name}:{}: {e}", i + 1))?;
        let mut w = line.split_whitespace();
        let route = w.next().and_then(|p| {
            let hop = w.next();
            match Prefix::parse_strict(p) {
                Ok(p) => Some(Route::V4(p, hop.and_then(|h| h.parse().ok()))),
                Err(_) => Prefix6::parse_strict(p)
                    .ok()
                    .map(|p| Route::V6(p, hop.and_then(|h| h.parse().ok()))),
            }
        });
        match route {
            Some(r) if each(r) => st.routes += 1,
            _ => st.skipped += 1,
        }
    }
    Ok(st)
}

/// An MRT common header with a known type (TABLE_DUMP or TABLE_DUMP_V2) and a plausible
/// length; text tables start with a digit and never match.
fn looks_like_mrt(b: &[u8]) -> bool {
    b.len() >= 12
        && matches!(u16::from_be_bytes([b[4], b[5]]), 12 | 13)
        && u32::from_be_bytes([b[8], b[9], b[10], b[11]]) < mrt::MAX_RECORD as u32
}

pub mod mrt {
    //! MRT records (RFC 6396): the common header, TABLE_DUMP_V2 RIB_IPV4_UNICAST and
    //! RIB_IPV6_UNICAST (and their ADD-PATH forms, RFC 8050), RIB_GENERIC of unicast
    //! IPv4 or IPv6, and TABLE_DUMP AFI_IPv4 and AFI_IPv6. Other records are skipped. The
    //! next hop of a route is that of its first RIB entry: the NEXT_HOP attribute for
    //! IPv4, the first address of MP_REACH_NLRI for IPv6 (abbreviated to its next hop as
    //! RFC 6396 4.3.4 asks, or whole as older writers and TABLE_DUMP have it).

    use super::{Route, Stats};
    use fib::{Prefix, Prefix6};
    use std::io::Read;
    use std::net::{Ipv4Addr, Ipv6Addr};

    pub const MAX_RECORD: usize = 1 << 24;
    const TABLE_DUMP: u16 = 12;
    const TABLE_DUMP_V2: u16 = 13;
    const RIB_IPV4_UNICAST: u16 = 2;
    const RIB_IPV6_UNICAST: u16 = 4;
    const RIB_GENERIC: u16 = 6;
    const RIB_IPV4_UNICAST_ADDPATH: u16 = 8;
    const RIB_IPV6_UNICAST_ADDPATH: u16 = 10;
    const RIB_GENERIC_ADDPATH: u16 = 12;

    /// Why a record could not be read.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Error {
        /// Index of the record (0-based) and its byte offset in the stream.
        pub record: usize,
        pub offset: u64,
        pub what: String,
    }

    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "MRT record {} at byte {}: {}",
                self.record, self.offset, self.what
            )
        }
    }

    struct Cur<'a> {
        b: &'a [u8],
        at: usize,
    }

    impl<'a> Cur<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
            let end = self
                .at
                .checked_add(n)
                .filter(|&e| e <= self.b.len())
                .ok_or_else(|| {
                    format!(
                        "truncated: need {n} bytes at {} of {}",
                        self.at,
                        self.b.len()
                    )
                })?;
            let s = &self.b[self.at..end];
            self.at = end;
            Ok(s)
        }
        fn u8(&mut self) -> Result<u8, String> {
            Ok(self.take(1)?[0])
        }
        fn u16(&mut self) -> Result<u16, String> {
            let s = self.take(2)?;
            Ok(u16::from_be_bytes([s[0], s[1]]))
        }
        fn skip(&mut self, n: usize) -> Result<(), String> {
            self.take(n).map(|_| ())
        }
    }

    /// The next hops of a BGP path attribute list: NEXT_HOP (type 3) and the first
    /// address of MP_REACH_NLRI (type 14) if it is IPv6.
    fn next_hops(attrs: &[u8]) -> Result<(Option<Ipv4Addr>, Option<Ipv6Addr>), String> {
        let mut c = Cur { b: attrs, at: 0 };
        let (mut v4, mut v6) = (None, None);
        while c.at < attrs.len() {
            let flags = c.u8()?;
            let ty = c.u8()?;
            let len = if flags & 0x10 != 0 {
                c.u16()? as usize
            } else {
                c.u8()? as usize
            };
            let v = c.take(len)?;
            if ty == 3 && len == 4 {
                v4 = Some(Ipv4Addr::new(v[0], v[1], v[2], v[3]));
            }
            if ty == 14 {
                // Abbreviated (length, address) or whole (AFI, SAFI, length, address...).
                let hop = match v {
                    [n, rest @ ..] if *n as usize <= rest.len() && matches!(n, 16 | 32) => rest,
                    [_, _, _, n, rest @ ..]
                        if *n as usize <= rest.len() && matches!(n, 16 | 32) =>
                    {
                        rest
                    }
                    _ => &[],
                };
                if let Ok(a) = <[u8; 16]>::try_from(hop.get(..16).unwrap_or(&[])) {
                    v6 = Some(Ipv6Addr::from(a));
                }
            }
        }
        Ok((v4, v6))
    }

    /// A prefix of `afi` (1 IPv4, 2 IPv6) as BGP encodes it: a length, then the bytes it
    /// needs.
    fn prefix(c: &mut Cur, afi: u16) -> Result<Route, String> {
        let len = c.u8()?;
        let max = if afi == 1 { 32 } else { 128 };
        if len > max {
            return Err(format!("prefix length {len}"));
        }
        let bytes = c.take((len as usize).div_ceil(8))?;
        let mut a = [0u8; 16];
        a[..bytes.len()].copy_from_slice(bytes);
        Ok(if afi == 1 {
            Route::V4(
                Prefix::new(Ipv4Addr::new(a[0], a[1], a[2], a[3]), len),
                None,
            )
        } else {
            Route::V6(Prefix6::new(Ipv6Addr::from(a), len), None)
        })
    }

    /// `r` with the next hop of its family from `attrs`.
    fn with_hop(r: Route, attrs: &[u8]) -> Result<Route, String> {
        let (v4, v6) = next_hops(attrs)?;
        Ok(match r {
            Route::V4(p, _) => Route::V4(p, v4),
            Route::V6(p, _) => Route::V6(p, v6),
        })
    }

    /// Parses the body of one record; `Some` for a unicast route.
    pub fn parse_record(ty: u16, subtype: u16, body: &[u8]) -> Result<Option<Route>, String> {
        let mut c = Cur { b: body, at: 0 };
        let addpath = matches!(
            subtype,
            RIB_IPV4_UNICAST_ADDPATH | RIB_IPV6_UNICAST_ADDPATH | RIB_GENERIC_ADDPATH
        );
        match (ty, subtype) {
            (
                TABLE_DUMP_V2,
                RIB_IPV4_UNICAST
                | RIB_IPV4_UNICAST_ADDPATH
                | RIB_IPV6_UNICAST
                | RIB_IPV6_UNICAST_ADDPATH
                | RIB_GENERIC
                | RIB_GENERIC_ADDPATH,
            ) => {
                c.skip(4)?; // sequence
                let afi = match subtype {
                    RIB_IPV4_UNICAST | RIB_IPV4_UNICAST_ADDPATH => 1,
                    RIB_IPV6_UNICAST | RIB_IPV6_UNICAST_ADDPATH => 2,
                    _ => {
                        let (afi, safi) = (c.u16()?, c.u8()?);
                        if safi != 1 || !matches!(afi, 1 | 2) {
                            return Ok(None); // not unicast IPv4 or IPv6
                        }
                        afi
                    }
                };
                let mut route = prefix(&mut c, afi)?;
                let entries = c.u16()?;
                for i in 0..entries {
                    c.skip(2 + 4)?; // peer index, originated time
                    if addpath {
                        c.skip(4)?; // path identifier
                    }
                    let alen = c.u16()? as usize;
                    let attrs = c.take(alen)?;
                    if i == 0 {
                        route = with_hop(route, attrs)?;
                    }
                }
                Ok(Some(route))
            }
            (TABLE_DUMP, 1 | 2) => {
                let afi = subtype;
                let alen = if afi == 1 { 4 } else { 16 };
                c.skip(2 + 2)?; // view, sequence
                let a = c.take(alen)?;
                let len = c.u8()?;
                let mut p = a.to_vec();
                p.truncate((len as usize).div_ceil(8));
                p.insert(0, len);
                let route = prefix(&mut Cur { b: &p, at: 0 }, afi)?;
                c.skip(1 + 4 + alen + 2)?; // status, originated time, peer address, peer AS
                let attrs_len = c.u16()? as usize;
                Ok(Some(with_hop(route, c.take(attrs_len)?)?))
            }
            _ => Ok(None),
        }
    }

    /// Reads records until the end of the stream; `each` says whether it took a route.
    pub fn read(r: &mut dyn Read, each: &mut dyn FnMut(Route) -> bool) -> Result<Stats, Error> {
        let mut st = Stats::default();
        let mut body = Vec::new();
        let mut offset = 0u64;
        for record in 0.. {
            let err = |what: String| Error {
                record,
                offset,
                what,
            };
            let mut h = [0u8; 12];
            match read_full(r, &mut h).map_err(|e| err(e.to_string()))? {
                0 => break,
                12 => {}
                n => return Err(err(format!("truncated header: {n} of 12 bytes"))),
            }
            let ty = u16::from_be_bytes([h[4], h[5]]);
            let sub = u16::from_be_bytes([h[6], h[7]]);
            let len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
            if len > MAX_RECORD {
                return Err(err(format!("record length {len} is implausible")));
            }
            body.resize(len, 0);
            if read_full(r, &mut body).map_err(|e| err(e.to_string()))? != len {
                return Err(err(format!("truncated body: record says {len} bytes")));
            }
            match parse_record(ty, sub, &body).map_err(err)? {
                Some(route) if each(route) => st.routes += 1,
                _ => st.skipped += 1,
            }
            offset += 12 + len as u64;
        }
        Ok(st)
    }

    fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Writes a TABLE_DUMP_V2 RIB_IPV4_UNICAST record with one entry (for tests).
    pub fn write_rib_ipv4(out: &mut Vec<u8>, seq: u32, p: Prefix, hop: Option<Ipv4Addr>) {
        let mut attrs = vec![0x40, 1, 1, 0]; // ORIGIN IGP
        if let Some(h) = hop {
            attrs.extend_from_slice(&[0x40, 3, 4]);
            attrs.extend_from_slice(&h.octets());
        }
        let mut body = seq.to_be_bytes().to_vec();
        body.push(p.len());
        body.extend_from_slice(&p.addr().octets()[..(p.len() as usize).div_ceil(8)]);
        body.extend_from_slice(&1u16.to_be_bytes());
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        body.extend_from_slice(&(attrs.len() as u16).to_be_bytes());
        body.extend_from_slice(&attrs);
        out.extend_from_slice(&1_700_000_000u32.to_be_bytes());
        out.extend_from_slice(&TABLE_DUMP_V2.to_be_bytes());
        out.extend_from_slice(&RIB_IPV4_UNICAST.to_be_bytes());
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
    }

    /// Writes a PEER_INDEX_TABLE record with no peers (for tests).
    pub fn write_peer_index(out: &mut Vec<u8>) {
        let body = [192, 0, 2, 1, 0, 0, 0, 0];
        out.extend_from_slice(&1_700_000_000u32.to_be_bytes());
        out.extend_from_slice(&TABLE_DUMP_V2.to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes());
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tessera-tables-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn routes() -> Vec<(Prefix, Option<Ipv4Addr>)> {
        vec![
            (
                Prefix::parse_strict("1.0.0.0/24").unwrap(),
                Some(Ipv4Addr::new(192, 0, 2, 1)),
            ),
            (Prefix::parse_strict("10.0.0.0/8").unwrap(), None),
            (
                Prefix::parse_strict("203.0.113.128/25").unwrap(),
                Some(Ipv4Addr::new(192, 0, 2, 2)),
            ),
            (
                Prefix::parse_strict("0.0.0.0/0").unwrap(),
                Some(Ipv4Addr::new(192, 0, 2, 3)),
            ),
            (
                Prefix::parse_strict("198.51.100.7/32").unwrap(),
                Some(Ipv4Addr::new(192, 0, 2, 4)),
            ),
        ]
    }

    fn collect(p: &Path) -> (Vec<(Prefix, Option<Ipv4Addr>)>, Stats) {
        let mut v = Vec::new();
        let st = read(p, |a, b| v.push((a, b))).unwrap();
        (v, st)
    }

    #[test]
    fn mrt_plain_gzip_and_bzip2() {
        let mut mrt = Vec::new();
        mrt::write_peer_index(&mut mrt);
        for (i, (p, h)) in routes().into_iter().enumerate() {
            mrt::write_rib_ipv4(&mut mrt, i as u32, p, h);
        }
        let d = dir();
        std::fs::write(d.join("rib"), &mrt).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&mrt).unwrap();
        std::fs::write(d.join("rib.gz"), gz.finish().unwrap()).unwrap();
        let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
        bz.write_all(&mrt).unwrap();
        std::fs::write(d.join("rib.bz2"), bz.finish().unwrap()).unwrap();
        for f in ["rib", "rib.gz", "rib.bz2"] {
            let (v, st) = collect(&d.join(f));
            assert_eq!(v, routes(), "{f}");
            assert_eq!(
                st,
                Stats {
                    routes: 5,
                    skipped: 1,
                    mrt: true
                },
                "{f}"
            );
        }
        // A truncated dump is an error naming the record.
        std::fs::write(d.join("cut"), &mrt[..mrt.len() - 3]).unwrap();
        let e = read(&d.join("cut"), |_, _| {}).unwrap_err();
        assert!(
            e.contains("MRT record 5 at byte") && e.contains("truncated"),
            "{e}"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn ipv6_routes_from_mrt_and_text() {
        // RIB_IPV6_UNICAST, 2001:db8:1::/48, one entry whose MP_REACH_NLRI is abbreviated
        // to its next hop (RFC 6396 4.3.4), then TABLE_DUMP AFI_IPv6 with a whole one.
        let hop: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let mut mp = vec![0x80, 14, 17, 16];
        mp.extend_from_slice(&hop.octets());
        let mut body = vec![0, 0, 0, 1, 48, 0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 1];
        body.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        body.extend_from_slice(&(mp.len() as u16).to_be_bytes());
        body.extend_from_slice(&mp);
        let mut rec = vec![0, 0, 0, 0, 0, 13, 0, 4];
        rec.extend_from_slice(&(body.len() as u32).to_be_bytes());
        rec.extend_from_slice(&body);
        let mut whole = vec![0x80, 14, 20, 0, 2, 1, 16];
        whole.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
        let mut v1 = vec![0, 0, 0, 0];
        v1.extend_from_slice(&"2001:db8:200::".parse::<Ipv6Addr>().unwrap().octets());
        v1.extend_from_slice(&[40, 1, 0, 0, 0, 0]);
        v1.extend_from_slice(&[0; 16]);
        v1.extend_from_slice(&[0, 1]);
        v1.extend_from_slice(&(whole.len() as u16).to_be_bytes());
        v1.extend_from_slice(&whole);
        rec.extend_from_slice(&[0, 0, 0, 0, 0, 12, 0, 2]);
        rec.extend_from_slice(&(v1.len() as u32).to_be_bytes());
        rec.extend_from_slice(&v1);
        let d = dir();
        std::fs::write(d.join("rib6"), &rec).unwrap();
        std::fs::write(
            d.join("t6.txt"),
            "2001:db8:1::/48 2001:db8::1\n10.0.0.0/8\n",
        )
        .unwrap();
        let mut v = Vec::new();
        let st = read6(&d.join("rib6"), |p, h| v.push((p.to_string(), h))).unwrap();
        assert_eq!(
            v,
            [
                ("2001:db8:1::/48".to_string(), Some(hop)),
                (
                    "2001:db8:200::/40".to_string(),
                    Some("2001:db8::2".parse().unwrap())
                )
            ]
        );
        assert_eq!((st.routes, st.skipped, st.mrt), (2, 0, true));
        assert_eq!(read(&d.join("rib6"), |_, _| {}).unwrap().skipped, 2);
        let mut v = Vec::new();
        let st = read6(&d.join("t6.txt"), |p, h| v.push((p.to_string(), h))).unwrap();
        assert_eq!(v, [("2001:db8:1::/48".to_string(), Some(hop))]);
        assert_eq!((st.routes, st.skipped), (1, 1));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn text_tables() {
        let d = dir();
        std::fs::write(
            d.join("t.txt"),
            "1.0.0.0/24\t192.0.2.1\t13335\n10.0.0.0/8\n2001:db8::/32\n",
        )
        .unwrap();
        let (v, st) = collect(&d.join("t.txt"));
        assert_eq!(v, routes()[..2].to_vec());
        assert_eq!((st.routes, st.skipped, st.mrt), (2, 1, false));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
