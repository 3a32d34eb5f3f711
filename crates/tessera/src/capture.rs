//! `tessera capture`: copies of the frames a running element receives and sends, as pcap.
//!
//! The element runs the filter (classic BPF compiled from tcpdump's syntax by libpcap,
//! through `tcpdump -ddd`) and sends batches of frames to a datagram socket this command
//! binds (see `dataplane::capture`); this command writes them as pcap with nanosecond
//! timestamps, to a file or to standard output (`-w -`), flushing after every batch so
//! that `tcpdump -r -` sees frames as they come.

use anyhow::{bail, Context, Result};
use dataplane::capture::{records, MAX_BATCH, SENT};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, TsResolution};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What `tessera capture` was asked.
pub struct CaptureArgs {
    pub control: PathBuf,
    pub port: Option<String>,
    pub filter: Option<String>,
    pub count: Option<u64>,
    pub write: String,
}

/// Compiles a tcpdump expression to classic BPF with `tcpdump -ddd` (libpcap's compiler),
/// for Ethernet frames.
pub fn compile(expr: &str) -> Result<Vec<dataplane::capture::Insn>> {
    let o = std::process::Command::new("tcpdump")
        .args(["-ddd", "-y", "EN10MB", expr])
        .output()
        .context("--filter needs tcpdump (libpcap compiles the expression): apt install tcpdump")?;
    if !o.status.success() {
        bail!(
            "--filter {expr:?}: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    dataplane::capture::parse_ddd(&String::from_utf8_lossy(&o.stdout))
        .map_err(|e| anyhow::anyhow!("--filter {expr:?}: tcpdump -ddd gave {e}"))
}

pub fn run(a: &CaptureArgs) -> Result<i32> {
    let filter = a.filter.as_deref().map(compile).transpose()?;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGPIPE, stop.clone())?;
    let path = std::env::temp_dir().join(format!("tessera-capture-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let sock = UnixDatagram::bind(&path).with_context(|| format!("bind {}", path.display()))?;
    let _cleanup = Remove(path.clone());
    let _ = io::netdev::set_recv_buffer(sock.as_raw_fd(), 8 << 20);
    sock.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut req = serde_json::json!({"cmd": "capture-start", "path": path.to_string_lossy()});
    if let Some(p) = &a.port {
        req["port"] = p.clone().into();
    }
    if let Some(f) = &filter {
        req["filter"] = f
            .iter()
            .map(|i| serde_json::json!([i.code, i.jt, i.jf, i.k]))
            .collect();
    }
    if let Some(n) = a.count {
        req["count"] = n.into();
    }
    let v = control::ctlsock::request_with(&a.control, req).map_err(anyhow::Error::msg)?;
    if let Some(e) = v["error"].as_str() {
        bail!("{}: {e}", a.control.display());
    }
    let out: Box<dyn Write> = if a.write == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(std::io::BufWriter::new(
            std::fs::File::create(&a.write).with_context(|| format!("-w {}", a.write))?,
        ))
    };
    let header = PcapHeader {
        datalink: DataLink::ETHERNET,
        ts_resolution: TsResolution::NanoSecond,
        snaplen: dataplane::capture::SNAPLEN as u32,
        ..Default::default()
    };
    // pcap-file's writer cannot be flushed: it writes into a buffer that goes out (and is
    // flushed) after every batch.
    let mut out = out;
    let pending = Pending::default();
    let mut w = PcapWriter::with_header(pending.clone(), header).context("pcap header")?;
    let head = std::mem::take(&mut *pending.0.borrow_mut());
    out.write_all(&head).and_then(|_| out.flush())?;
    let (mut got, mut sent) = (0u64, 0u64);
    let mut buf = vec![0u8; MAX_BATCH + 64];
    while !stop.load(Ordering::Relaxed) && a.count.is_none_or(|c| got < c) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        };
        for r in records(&buf[..n]) {
            // Each worker of the element sends its own batches: stop at the count exactly.
            if a.count.is_some_and(|c| got >= c) {
                break;
            }
            let p = PcapPacket {
                timestamp: Duration::from_nanos(r.ts_ns),
                orig_len: r.orig_len,
                data: r.data.into(),
            };
            if w.write_packet(&p).is_err() {
                stop.store(true, Ordering::Relaxed); // the reader of `-w -` has gone
                break;
            }
            got += 1;
            sent += (r.dir == SENT) as u64;
        }
        let bytes = std::mem::take(&mut *pending.0.borrow_mut());
        if out.write_all(&bytes).and_then(|_| out.flush()).is_err() {
            break; // the reader of `-w -` has gone
        }
    }
    let v = control::ctlsock::request(&a.control, "capture-stop").unwrap_or_default();
    eprintln!(
        "capture: {got} frames ({} received, {sent} sent); lost at the element: {}",
        got - sent,
        v["lost"].as_u64().unwrap_or(0)
    );
    Ok(0)
}

/// Bytes the pcap writer wrote, waiting to go out.
#[derive(Clone, Default)]
struct Pending(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl Write for Pending {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Removes the socket file when the capture ends.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(Path::new(&self.0));
    }
}
