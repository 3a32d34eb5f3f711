//! Entry points shared by the fuzz targets and the corpus replay test.

use std::path::Path;

/// Parses arbitrary bytes as a forwarder config file and as an LB config file. Errors must
/// carry a line inside the text.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("fuzz.toml");
    let errors = [
        crate::config::ForwarderFile::parse(path, &text).err(),
        crate::balancer::BalancerFile::parse(path, &text).err(),
        crate::vcp::ControllerFile::parse(path, &text).err(),
    ];
    for e in errors.into_iter().flatten() {
        assert!(
            e.line <= text.lines().count() + 1,
            "error line {} past the end: {e}",
            e.line
        );
        let _ = e.to_string();
    }
}

/// Parses arbitrary bytes as a routes file, of IPv4 routes and of either family.
pub fn routes(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut n = 0;
    match crate::routes::parse("fuzz.txt", &text, |p, _, _| {
        n += 1;
        assert!(p.len() <= 32);
        Ok(())
    }) {
        Ok(count) => assert_eq!(count, n),
        Err(e) => assert!(e.line >= 1 && e.line <= text.lines().count()),
    }
    let mut n = 0;
    match crate::routes::parse_lines("fuzz.txt", &text, |l, _| {
        n += 1;
        match l {
            crate::routes::Line::V4(p, h) => assert!(p.len() <= 32 && !h.is_empty()),
            crate::routes::Line::V6(p, h) => assert!(p.len() <= 128 && !h.is_empty()),
        }
        Ok(())
    }) {
        Ok(count) => assert_eq!(count, n),
        Err(e) => assert!(e.line >= 1 && e.line <= text.lines().count()),
    }
}

/// Parses arbitrary bytes as an MRT stream, and each record type on the bytes as a body.
pub fn mrt(data: &[u8]) {
    let mut r = data;
    let mut n = 0;
    if let Ok(st) = crate::tables::mrt::read(&mut r, &mut |route| {
        match route {
            crate::tables::Route::V4(p, _) => assert!(p.len() <= 32),
            crate::tables::Route::V6(p, _) => assert!(p.len() <= 128),
        }
        n += 1;
        true
    }) {
        assert_eq!(st.routes, n);
    }
    for (ty, sub) in [
        (13, 2),
        (13, 4),
        (13, 6),
        (13, 8),
        (13, 10),
        (13, 12),
        (12, 1),
        (12, 2),
    ] {
        let _ = crate::tables::mrt::parse_record(ty, sub, data);
    }
}

/// Feeds arbitrary bytes to the controller as an FPM stream: frames are split, their netlink
/// messages parsed and applied to a table; nothing panics, and the table's digest is always
/// the digest of what it holds.
pub fn fpm(data: &[u8]) {
    let mut state = crate::vcp::FpmState::default();
    let mut fib = crate::distrib::Fib::new(1, 64);
    let mut at = 0;
    while let Ok(Some((len, payload))) = wire::fpm::split_frame(&data[at..]) {
        if let Ok(msgs) = wire::fpm::messages(payload) {
            state.frame(msgs, &mut fib);
        }
        at += len;
    }
    if at > 0 {
        state.connection();
        state.sweep(&mut fib);
        assert!(
            fib.is_empty(),
            "a sweep with nothing resent empties the table"
        );
    }
    let _ = fib.version();
}
