//! Rates as users write them: `100kpps`, `1.5Mpps`, `800Mbps`, `10Gbps`, `2000` (packets/s),
//! or `max`. Bit rates count what the wire carries: the frame with its FCS, plus the
//! preamble and start delimiter (8 bytes) and the inter-frame gap (12 bytes), as a router
//! tester counts.

/// Bytes on the wire around each frame: preamble + SFD (8) and inter-frame gap (12).
pub const WIRE_OVERHEAD: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    Pps(f64),
    Bps(f64),
    Max,
}

impl Rate {
    pub fn parse(s: &str) -> Result<Rate, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("max") {
            return Ok(Rate::Max);
        }
        let lower = t.to_ascii_lowercase();
        let (num, unit) = lower.split_at(
            lower
                .find(|c: char| c.is_ascii_alphabetic())
                .unwrap_or(lower.len()),
        );
        let v: f64 = num.trim().parse().map_err(|_| {
            format!(
                "rate {s:?}: expected a number with a unit, like 100kpps, 1.5Mpps, 800Mbps or max"
            )
        })?;
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("rate {s:?} must be above zero"));
        }
        let r = match unit {
            "" | "pps" => Rate::Pps(v),
            "kpps" => Rate::Pps(v * 1e3),
            "mpps" => Rate::Pps(v * 1e6),
            "bps" => Rate::Bps(v),
            "kbps" => Rate::Bps(v * 1e3),
            "mbps" => Rate::Bps(v * 1e6),
            "gbps" => Rate::Bps(v * 1e9),
            _ => {
                return Err(format!(
                    "rate {s:?}: unknown unit {unit:?} (pps, kpps, Mpps, bps, kbps, Mbps, Gbps)"
                ))
            }
        };
        Ok(r)
    }

    /// Packets per second for frames of `size` bytes (with FCS); `None` for `max`.
    pub fn pps(&self, size: usize) -> Option<f64> {
        match *self {
            Rate::Pps(p) => Some(p),
            Rate::Bps(b) => Some(b / ((size + WIRE_OVERHEAD) * 8) as f64),
            Rate::Max => None,
        }
    }
}

/// Bits per second on the wire of `pps` frames of `size` bytes (with FCS).
pub fn wire_bps(pps: f64, size: usize) -> f64 {
    pps * ((size + WIRE_OVERHEAD) * 8) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates() {
        assert_eq!(Rate::parse("100kpps").unwrap(), Rate::Pps(100e3));
        assert_eq!(Rate::parse("1.5Mpps").unwrap(), Rate::Pps(1.5e6));
        assert_eq!(Rate::parse("800Mbps").unwrap(), Rate::Bps(800e6));
        assert_eq!(Rate::parse("2000").unwrap(), Rate::Pps(2000.0));
        assert_eq!(Rate::parse("MAX").unwrap(), Rate::Max);
        for bad in ["", "fast", "-5kpps", "10kbit", "0pps"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wire_rate_counts_preamble_and_gap() {
        // 64-byte frames at 10 Gbit/s: the classic 14.88 Mpps.
        let pps = Rate::Bps(10e9).pps(64).unwrap();
        assert!((pps - 14_880_952.4).abs() < 1.0, "{pps}");
        assert!((wire_bps(pps, 64) - 10e9).abs() < 1.0);
    }
}
