//! A hostile registry for tests: an HTTP/1.1 server on 127.0.0.1 that
//! answers each request with whatever the test's function says, including
//! answers no honest registry gives: endless bodies, huge error bodies, a
//! body trickled one byte a second, redirects anywhere. It logs every
//! request it reads, so a test can check what a client sent (and where).
//!
//! Each connection gets one answer, then `Connection: close`; a thread
//! serves each connection, and stops writing when the client hangs up or
//! the server drops.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest request head read; a longer one is answered 431.
const MAX_HEAD_BYTES: u64 = 64 << 10;
/// The size of each write of a filler body.
const CHUNK: usize = 64 << 10;

/// A request, as the server read it (its body is read and dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `HEAD`, `POST` …
    pub method: String,
    /// The request target: the path and the query.
    pub target: String,
    /// Each header, its name lowercased.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The target's path, without its query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }
}

/// What an answer's body is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// These bytes, with their `Content-Length`.
    Bytes(Vec<u8>),
    /// This many bytes of `x`, with their `Content-Length`, as fast as the
    /// client reads them.
    Sized(u64),
    /// `x` until the client hangs up, with no length.
    Endless,
    /// These bytes, with their `Content-Length`, one byte a second.
    Trickle(Vec<u8>),
}

/// An answer: a status, headers and a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Body,
}

impl Reply {
    /// `status` with `body`.
    pub fn new(status: u16, body: Body) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body,
        }
    }

    /// `status` with an empty body.
    pub fn status(status: u16) -> Self {
        Reply::new(status, Body::Bytes(Vec::new()))
    }

    /// `status` with `text` as its body.
    pub fn text(status: u16, text: &str) -> Self {
        Reply::new(status, Body::Bytes(text.as_bytes().to_vec()))
    }

    /// A `302` to `location`.
    pub fn redirect(location: &str) -> Self {
        Reply::status(302).header("Location", location)
    }

    /// The same, with the header `name: value` too.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// The running server; stopped on drop.
pub struct HostileServer {
    address: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl HostileServer {
    /// Starts a server on 127.0.0.1 on a free port that answers each
    /// request with `answer(&request)`.
    pub fn start(answer: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a free port on 127.0.0.1");
        let address = listener.local_addr().expect("the listener's address");
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let answer = Arc::new(answer);
        let (stopped, log) = (stop.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let (stopped, log, answer) = (stopped.clone(), log.clone(), answer.clone());
                std::thread::spawn(move || serve(stream, &*answer, &log, &stopped));
            }
        });
        HostileServer {
            address,
            stop,
            requests,
        }
    }

    /// `127.0.0.1:<port>`, as a reference's registry part.
    pub fn host(&self) -> String {
        self.address.to_string()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Every request read so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("the log").clone()
    }
}

impl Drop for HostileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.address);
    }
}

/// Reads one request from `stream`, logs it, and writes the answer.
fn serve(
    stream: TcpStream,
    answer: &(dyn Fn(&Request) -> Reply + Send + Sync),
    log: &Mutex<Vec<Request>>,
    stop: &AtomicBool,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let Some(request) = read_request(&mut reader) else {
        let _ = writer.write_all(b"HTTP/1.1 431 Too Large\r\nConnection: close\r\n\r\n");
        return;
    };
    log.lock().expect("the log").push(request.clone());
    let reply = answer(&request);
    let _ = write_reply(&mut writer, &reply, request.method == "HEAD", stop);
}

/// The request's head, with its body (by `Content-Length`) read and dropped.
fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut head = reader.by_ref().take(MAX_HEAD_BYTES);
    let mut line = String::new();
    head.read_line(&mut line).ok()?;
    let mut words = line.split_whitespace();
    let (method, target) = (words.next()?.to_string(), words.next()?.to_string());
    let mut headers = Vec::new();
    loop {
        line.clear();
        if head.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let text = line.trim_end();
        if text.is_empty() {
            break;
        }
        let (name, value) = text.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let request = Request {
        method,
        target,
        headers,
    };
    let length = (request.header("content-length"))
        .and_then(|length| length.parse::<u64>().ok())
        .unwrap_or(0);
    std::io::copy(&mut reader.by_ref().take(length), &mut std::io::sink()).ok()?;
    Some(request)
}

/// Writes `reply` (only its head for a `HEAD`), stopping when the client
/// hangs up or `stop` is set.
fn write_reply(
    writer: &mut TcpStream,
    reply: &Reply,
    head_only: bool,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} Hostile\r\nConnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let length = match &reply.body {
        Body::Bytes(bytes) | Body::Trickle(bytes) => Some(bytes.len() as u64),
        Body::Sized(length) => Some(*length),
        Body::Endless => None,
    };
    if let Some(length) = length {
        head.push_str(&format!("Content-Length: {length}\r\n"));
    }
    head.push_str("\r\n");
    writer.write_all(head.as_bytes())?;
    if head_only {
        return Ok(());
    }
    let filler = vec![b'x'; CHUNK];
    match &reply.body {
        Body::Bytes(bytes) => writer.write_all(bytes)?,
        Body::Sized(length) => {
            let mut left = *length;
            while left > 0 && !stop.load(Ordering::SeqCst) {
                let n = left.min(CHUNK as u64) as usize;
                writer.write_all(&filler[..n])?;
                left -= n as u64;
            }
        }
        Body::Endless => {
            while !stop.load(Ordering::SeqCst) {
                writer.write_all(&filler)?;
            }
        }
        Body::Trickle(bytes) => {
            for byte in bytes {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                writer.write_all(&[*byte])?;
                writer.flush()?;
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    writer.flush()
}
