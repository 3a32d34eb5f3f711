//! The control socket: a Unix stream socket speaking JSON lines.
//!
//! Request: `{"cmd": "counters"}`. Response: `{"ok": true, "data": ...}` or
//! `{"ok": false, "error": "..."}`, one line each. Commands of the forwarder: `counters`,
//! `describe` (every counter's meaning), `interfaces`, `neighbours`, `routes`.

use serde_json::{json, Value};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Answers one request: the command, and the whole request object for its arguments.
pub type Handler = Arc<dyn Fn(&str, &Value) -> Result<Value, String> + Send + Sync>;

/// A running control-socket server; stops and removes the socket file when dropped.
pub struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Serves `handler` on a Unix socket at `path`. A stale socket file (nobody listening) is
/// replaced; a live one is an error.
pub fn serve(path: &Path, handler: Handler) -> io::Result<Server> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{}: another element is serving this control socket",
                    path.display()
                ),
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(c) = conn {
                    let _ = handle(c, &handler);
                }
            }
        })?;
    Ok(Server {
        path: path.into(),
        stop,
        thread: Some(thread),
    })
}

fn handle(c: UnixStream, handler: &Handler) -> io::Result<()> {
    c.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut w = c.try_clone()?;
    for line in BufReader::new(c).lines() {
        let line = line?;
        let resp = match serde_json::from_str::<Value>(&line) {
            Ok(v) => match v.get("cmd").and_then(|c| c.as_str()) {
                Some(cmd) => match handler(cmd, &v) {
                    Ok(data) => json!({"ok": true, "data": data}),
                    Err(e) => json!({"ok": false, "error": e}),
                },
                None => json!({"ok": false, "error": "request has no \"cmd\" string"}),
            },
            Err(e) => json!({"ok": false, "error": format!("request is not JSON: {e}")}),
        };
        writeln!(w, "{resp}")?;
    }
    Ok(())
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sends one command and returns the response's `data`, or its error as text.
pub fn request(path: &Path, cmd: &str) -> Result<Value, String> {
    request_with(path, json!({"cmd": cmd}))
}

/// Sends one request object (`{"cmd": ..., args...}`) and returns the response's `data`.
pub fn request_with(path: &Path, req: Value) -> Result<Value, String> {
    let mut s = UnixStream::connect(path).map_err(|e| format!("{}: {e}", path.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    writeln!(s, "{req}").map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&line).map_err(|e| format!("bad response: {e}"))?;
    if v["ok"] == json!(true) {
        Ok(v["data"].clone())
    } else {
        Err(v["error"].as_str().unwrap_or("unknown error").to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_response_and_cleanup() {
        let dir = std::env::temp_dir().join(format!("tessera-ctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("c.sock");
        let h: Handler = Arc::new(|cmd, _| {
            if cmd == "ping" {
                Ok(json!("pong"))
            } else {
                Err(format!("unknown command {cmd:?}"))
            }
        });
        let s = serve(&p, h.clone()).unwrap();
        assert_eq!(request(&p, "ping").unwrap(), json!("pong"));
        assert!(request(&p, "nope").unwrap_err().contains("unknown command"));
        assert!(serve(&p, h).is_err(), "a live socket is not taken over");
        drop(s);
        assert!(!p.exists());
        assert!(request(&p, "ping").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
