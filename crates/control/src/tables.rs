//! Route tables as users bring them: text (`PREFIX [NEXTHOP]`, more columns ignored) or MRT
//! RIB dumps (RFC 6396: TABLE_DUMP_V2 as RouteViews and RIPE RIS publish them, and the
//! older TABLE_DUMP), each plain, gzip- or bzip2-compressed. The format and compression
//! are recognised from the content, not the file name.

use fib::Prefix;
use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::path::Path;

/// What a read found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// IPv4 routes passed to the callback.
    pub routes: usize,
    /// Records or lines that are not IPv4 unicast routes (IPv6, peer tables, comments).
    pub skipped: usize,
    pub mrt: bool,
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
        match w.next().map(Prefix::parse_strict) {
            Some(Ok(p)) => {
                each(p, w.next().and_then(|h| h.parse().ok()));
                st.routes += 1;
            }
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
    //! MRT records (RFC 6396): the common header, TABLE_DUMP_V2 RIB_IPV4_UNICAST (and its
    //! ADD-PATH form, RFC 8050) and TABLE_DUMP AFI_IPv4. Other records are skipped. The next
    //! hop of a route is the NEXT_HOP attribute of its first RIB entry.

    use super::Stats;
    use fib::Prefix;
    use std::io::Read;
    use std::net::Ipv4Addr;

    pub const MAX_RECORD: usize = 1 << 24;
    const TABLE_DUMP: u16 = 12;
    const TABLE_DUMP_V2: u16 = 13;
    const RIB_IPV4_UNICAST: u16 = 2;
    const RIB_IPV4_UNICAST_ADDPATH: u16 = 8;

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

    /// The NEXT_HOP (type 3) of a BGP path attribute list.
    fn next_hop(attrs: &[u8]) -> Result<Option<Ipv4Addr>, String> {
        let mut c = Cur { b: attrs, at: 0 };
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
                return Ok(Some(Ipv4Addr::new(v[0], v[1], v[2], v[3])));
            }
        }
        Ok(None)
    }

    /// Parses the body of one record; `Some` for an IPv4 route.
    pub fn parse_record(
        ty: u16,
        subtype: u16,
        body: &[u8],
    ) -> Result<Option<(Prefix, Option<Ipv4Addr>)>, String> {
        let mut c = Cur { b: body, at: 0 };
        match (ty, subtype) {
            (TABLE_DUMP_V2, RIB_IPV4_UNICAST | RIB_IPV4_UNICAST_ADDPATH) => {
                c.skip(4)?; // sequence
                let len = c.u8()?;
                if len > 32 {
                    return Err(format!("prefix length {len}"));
                }
                let bytes = c.take((len as usize).div_ceil(8))?;
                let mut a = [0u8; 4];
                a[..bytes.len()].copy_from_slice(bytes);
                let prefix = Prefix::new(Ipv4Addr::from(a), len);
                let entries = c.u16()?;
                let mut hop = None;
                for i in 0..entries {
                    c.skip(2 + 4)?; // peer index, originated time
                    if subtype == RIB_IPV4_UNICAST_ADDPATH {
                        c.skip(4)?; // path identifier
                    }
                    let alen = c.u16()? as usize;
                    let attrs = c.take(alen)?;
                    if i == 0 {
                        hop = next_hop(attrs)?;
                    }
                }
                Ok(Some((prefix, hop)))
            }
            (TABLE_DUMP, 1) => {
                c.skip(2 + 2)?; // view, sequence
                let a = c.take(4)?;
                let len = c.u8()?;
                if len > 32 {
                    return Err(format!("prefix length {len}"));
                }
                c.skip(1 + 4 + 4 + 2)?; // status, originated time, peer address, peer AS
                let alen = c.u16()? as usize;
                let hop = next_hop(c.take(alen)?)?;
                Ok(Some((
                    Prefix::new(Ipv4Addr::new(a[0], a[1], a[2], a[3]), len),
                    hop,
                )))
            }
            _ => Ok(None),
        }
    }

    /// Reads records until the end of the stream.
    pub fn read(
        r: &mut dyn Read,
        each: &mut dyn FnMut(Prefix, Option<Ipv4Addr>),
    ) -> Result<Stats, Error> {
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
                Some((p, hop)) => {
                    each(p, hop);
                    st.routes += 1;
                }
                None => st.skipped += 1,
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
