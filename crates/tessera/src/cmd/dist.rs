//! `tessera dist ...` and `tessera inject`: DIST messages and raw frames, for tests and
//! operations.

use crate::*;

#[derive(Subcommand)]
pub(crate) enum DistCmd {
    /// Send one DIST message, given as JSON (see docs/dist.md), out of an interface.
    Send {
        #[arg(long)]
        iface: String,
        /// The message, e.g. '{"type": "balance", "flush": true, "entries": [{"mac":
        /// "02:00:00:00:01:01", "port": 1, "weight": 1}]}'; `-` reads it from stdin.
        #[arg(long, required_unless_present = "frame", conflicts_with = "frame")]
        json: Option<String>,
        /// A whole Ethernet frame in hex, sent as it is (e.g. one `dist listen --frames`
        /// printed: a replay); --dst, --src and --key-file do not apply.
        #[arg(long)]
        frame: Option<String>,
        /// Seal the message under the key in this file (hex digits), as elements with
        /// `[dist] key_file` do.
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// Destination MAC (default broadcast).
        #[arg(long, default_value = "ff:ff:ff:ff:ff:ff")]
        dst: String,
        /// Source MAC (default the interface's).
        #[arg(long)]
        src: Option<String>,
        /// Tag the frame with this VLAN id (to test that tagged DIST is refused).
        #[arg(long)]
        vlan: Option<u16>,
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
    /// Print the DIST messages arriving on an interface, one JSON object per line.
    Listen {
        #[arg(long)]
        iface: String,
        /// Stop after this many messages.
        #[arg(long)]
        count: Option<usize>,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 10.0)]
        duration: f64,
        /// Check each sealed message's tag against the key in this file ("auth": "ok" or
        /// "forged"; "unsealed" for a message without a seal).
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// Also print each whole frame in hex ("frame"), as `dist send --frame` takes it.
        #[arg(long)]
        frames: bool,
    },
    /// Write a new random DIST key (hex digits, mode 600) for `[dist] key_file`.
    Keygen {
        /// The file to write (replaced if it exists).
        #[arg(long)]
        out: PathBuf,
    },
    /// Decode a DIST message given in hex (the Ethernet payload, or a whole frame).
    Decode {
        #[arg(long)]
        hex: String,
    },
}

pub(crate) fn dist_cmd(cmd: DistCmd) -> Result<i32> {
    use wire::dist;
    match cmd {
        DistCmd::Send {
            iface,
            json,
            frame: Some(hex),
            vlan,
            count,
            ..
        } => {
            let mut frame = parse_hex(&hex)?;
            if frame.len() < 14 {
                bail!(
                    "--frame: {} bytes is shorter than an Ethernet header",
                    frame.len()
                );
            }
            if let Some(v) = vlan {
                if !(1..=4094).contains(&v) {
                    bail!("--vlan {v}: not 1 to 4094");
                }
                wire::ethernet::push_vlan(&mut frame, v);
            }
            let _ = json;
            let r = send_frames(&iface, &frame, count)?;
            print(
                &serde_json::json!({"sent": r.sent, "ring_full": r.ring_full, "bytes": frame.len()}),
            )
        }
        DistCmd::Send {
            iface,
            json,
            frame: None,
            key_file,
            dst,
            src,
            vlan,
            count,
        } => {
            let json = json.context("--json or --frame is needed")?;
            let text = if json == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                json
            };
            let msg: dist::Repr = serde_json::from_str(&text).with_context(|| {
                format!("--json: not a DIST message (see docs/dist.md): {text}")
            })?;
            msg.validate().map_err(|e| anyhow::anyhow!("--json: {e}"))?;
            let dst: wire::MacAddr = dst
                .parse()
                .map_err(|e| anyhow::anyhow!("--dst {dst:?}: {e}"))?;
            let src = match src {
                Some(s) => s.parse().map_err(|e| anyhow::anyhow!("--src {s:?}: {e}"))?,
                None => wire::MacAddr(io::netdev::mac(&iface)?),
            };
            let mut frame = msg.to_frame(src, dst).map_err(|e| anyhow::anyhow!("{e}"))?;
            if let Some(f) = &key_file {
                let key = read_dist_key(f)?;
                dist::auth::seal(&mut frame, &key, dist::auth::now_ns())
                    .map_err(|e| anyhow::anyhow!("sealing: {e:?}"))?;
            }
            if let Some(v) = vlan {
                if !(1..=4094).contains(&v) {
                    bail!("--vlan {v}: not 1 to 4094");
                }
                wire::ethernet::push_vlan(&mut frame, v);
            }
            let r = send_frames(&iface, &frame, count)?;
            let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
            print(
                &serde_json::json!({"sent": r.sent, "ring_full": r.ring_full, "bytes": frame.len(), "frame": hex}),
            )
        }
        w @ DistCmd::Listen { .. } => dist_listen(w),
        DistCmd::Keygen { out } => {
            control::config::write_new_dist_key(&out).map_err(anyhow::Error::msg)?;
            eprintln!(
                "DIST key written to {} (give every element the same key)",
                out.display()
            );
            Ok(0)
        }
        DistCmd::Decode { hex } => {
            let b = parse_hex(&hex)?;
            // A whole frame if it carries the DIST EtherType, else the payload.
            let payload = match wire::ethernet::Frame::new_checked(&b[..]) {
                Ok(f) if f.ethertype() == dist::ETHERTYPE => f.payload().to_vec(),
                _ => b.clone(),
            };
            let r = dist::Repr::parse(&payload).map_err(|e| anyhow::anyhow!("{e}"))?;
            print(&serde_json::to_value(&r)?)
        }
    }
}

/// A DIST key from a file of hex digits.
pub(crate) fn read_dist_key(path: &Path) -> Result<wire::dist::auth::Key> {
    control::config::read_dist_key(path).map_err(|e| anyhow::anyhow!("--key-file {e}"))
}

pub(crate) fn parse_hex(hex: &str) -> Result<Vec<u8>> {
    let digits: String = hex
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':')
        .collect();
    if !digits.len().is_multiple_of(2) {
        bail!("--hex: odd number of hex digits");
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16))
        .collect::<Result<_, _>>()
        .context("--hex: not hex")
}

/// Sends `count` copies of `frame` out of `iface` through an AF_PACKET ring.
pub(crate) fn send_frames(
    iface: &str,
    frame: &[u8],
    count: usize,
) -> Result<dataplane::port::TxResult> {
    use dataplane::port::Port;
    let mut port = io::AfPacket::open(
        iface,
        io::RingConfig {
            rx_blocks: 1,
            ..Default::default()
        },
    )?;
    let mut pool = dataplane::Pool::new();
    let mut q: Vec<dataplane::Pkt> = (0..count)
        .map(|_| dataplane::Pkt::from_bytes(frame))
        .collect();
    let r = port.send(&mut q, &mut pool)?;
    // Give the kernel a moment to drain the ring before the socket closes.
    std::thread::sleep(std::time::Duration::from_millis(50));
    Ok(r)
}

pub(crate) fn inject(iface: &str, hex: &str, count: usize) -> Result<i32> {
    let frame = parse_hex(hex)?;
    if frame.len() < 14 {
        bail!("--hex: a frame needs at least the 14-byte Ethernet header");
    }
    let r = send_frames(iface, &frame, count)?;
    println!(
        "{}",
        serde_json::json!({"sent": r.sent, "ring_full": r.ring_full})
    );
    Ok(0)
}

/// `tessera dist listen`: DIST messages received, decoded and printed.
fn dist_listen(w: DistCmd) -> Result<i32> {
    let DistCmd::Listen {
        iface,
        count,
        duration,
        key_file,
        frames,
    } = w
    else {
        bail!("tessera dist listen: another command's arguments");
    };
    use dataplane::port::Port;
    use wire::dist;
    let key = key_file.as_deref().map(read_dist_key).transpose()?;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let mut port = io::AfPacket::open(
        &iface,
        io::RingConfig {
            rx_blocks: 4,
            ..Default::default()
        },
    )?;
    let mut pool = dataplane::Pool::new();
    let mut batch = Vec::new();
    let end = std::time::Instant::now() + std::time::Duration::from_secs_f64(duration.max(0.0));
    let mut seen = 0;
    eprintln!("dist: listening on {iface}");
    while std::time::Instant::now() < end && !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let mut over = 0;
        port.recv(&mut pool, &mut batch, 64, &mut over)?;
        for p in batch.drain(..) {
            let Ok(f) = wire::ethernet::Frame::new_checked(&p.data[..]) else {
                continue;
            };
            if f.ethertype() != dist::ETHERTYPE {
                continue;
            }
            let mut v = match dist::Repr::parse(f.payload()) {
                Ok(r) => serde_json::to_value(&r)?,
                Err(e) => serde_json::json!({"error": e.to_string()}),
            };
            v["src"] = serde_json::json!(f.src().to_string());
            v["dst"] = serde_json::json!(f.dst().to_string());
            if let Some((id, counter)) = dist::auth::trailer(&p.data) {
                v["key_id"] = serde_json::json!(id);
                v["counter"] = serde_json::json!(counter);
            }
            if let Some(k) = &key {
                v["auth"] = serde_json::json!(match dist::auth::verify(&p.data, k) {
                    Ok(_) => "ok",
                    Err(dist::auth::Reject::Unauthenticated) => "unsealed",
                    Err(dist::auth::Reject::Malformed) => "malformed",
                    Err(_) => "forged",
                });
            }
            if frames {
                v["frame"] = serde_json::json!(p
                    .data
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>());
            }
            if let Some(vid) = f.vlan() {
                v["vlan"] = serde_json::json!(vid);
            }
            println!("{v}");
            seen += 1;
            pool.put(p);
        }
        if count.is_some_and(|c| seen >= c) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(if count.is_some_and(|c| seen < c) {
        1
    } else {
        0
    })
}
