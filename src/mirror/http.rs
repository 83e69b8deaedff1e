//! The readiness mirror's HTTP/1.1, pure: one request head read from a connection's
//! bytes (httparse, the parser hyper uses), and an answer written out. No runtime: a
//! check must cost microseconds of CPU, since the mirror's share of a saturated task is
//! small, and a parser and a `write` are all an answer needs.
#![forbid(unsafe_code)]

/// Largest request head: larger is 431 and the connection's end, as the app's endpoint.
pub use crate::settings::endpoint::MAX_HEAD;
/// Headers one request may carry (a load balancer's check sends a handful).
const MAX_HEADERS: usize = 64;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Ready,
    Live,
    NotFound,
    /// A method other than GET or HEAD.
    NotAllowed,
}

/// What the bytes of a connection hold, from its start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// Not a whole head yet.
    Partial,
    /// A request head `len` bytes long. `head_only`: a HEAD, answered without a body;
    /// `close`: the connection ends after the answer (HTTP/1.0 without keep-alive,
    /// `Connection: close`, or a body the mirror does not read).
    Request {
        route: Route,
        head_only: bool,
        close: bool,
        len: usize,
    },
    /// A head over `MAX_HEAD` or with too many headers: 431, then the end.
    TooLarge,
    /// Not HTTP/1.x: 400, then the end.
    Bad,
}

pub fn read_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Complete(_)) | Err(httparse::Error::TooManyHeaders) => {
            return Head::TooLarge
        }
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Head::TooLarge,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Bad,
    };
    let method = request.method.unwrap_or("");
    let path = request.path.unwrap_or("");
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    let route = match (method, path) {
        ("GET" | "HEAD", "/readyz") => Route::Ready,
        ("GET" | "HEAD", "/livez") => Route::Live,
        ("GET" | "HEAD", _) => Route::NotFound,
        _ => Route::NotAllowed,
    };
    let header = |name: &'static str| {
        (request.headers.iter())
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).to_ascii_lowercase())
    };
    let says = |word: &str| header("connection").any(|v| v.split(',').any(|t| t.trim() == word));
    let body = header("transfer-encoding").next().is_some()
        || header("content-length").any(|v| v.trim() != "0");
    let close = match request.version {
        Some(1) => says("close"),
        _ => !says("keep-alive"),
    } || body;
    Head::Request {
        route,
        head_only: method == "HEAD",
        close,
        len,
    }
}

/// Whether `bytes` (what arrived since the last look, with the three bytes before it)
/// hold a blank line, so a head ending in them can be whole. httparse takes a bare LF
/// as a line end too.
pub fn may_end_head(bytes: &[u8]) -> bool {
    bytes.windows(2).any(|w| w == b"\n\n") || bytes.windows(3).any(|w| w == b"\n\r\n")
}

/// Appends an answer: `status`, the one-line `body` (a newline added), and whether the
/// connection ends after it.
pub fn answer(out: &mut Vec<u8>, status: u16, body: &str, head_only: bool, close: bool) {
    use std::io::Write;
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    };
    let _ = write!(
        out,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\ncache-control: no-store\r\n{}{}\r\n",
        body.len() + 1,
        if status == 405 {
            "allow: GET, HEAD\r\n"
        } else {
            ""
        },
        if close { "connection: close\r\n" } else { "" },
    );
    if !head_only {
        out.extend_from_slice(body.as_bytes());
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(route: Route, head_only: bool, close: bool, len: usize) -> Head {
        Head::Request {
            route,
            head_only,
            close,
            len,
        }
    }

    #[test]
    fn heads_as_checks_send_them() {
        let alb = "GET /readyz HTTP/1.1\r\nHost: 10.0.1.7:9597\r\nConnection: close\r\nUser-Agent: ELB-HealthChecker/2.0\r\nAccept-Encoding: gzip, compressed\r\n\r\n";
        let rows: &[(&str, Head)] = &[
            (alb, request(Route::Ready, false, true, alb.len())),
            (
                "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n",
                request(Route::Ready, false, false, 33),
            ),
            (
                "GET /livez?full=1 HTTP/1.1\r\n\r\n",
                request(Route::Live, false, false, 30),
            ),
            (
                "HEAD /readyz HTTP/1.1\r\n\r\n",
                request(Route::Ready, true, false, 25),
            ),
            // HTTP/1.0 closes unless it asks to keep the connection.
            (
                "GET /readyz HTTP/1.0\r\n\r\n",
                request(Route::Ready, false, true, 24),
            ),
            (
                "GET /readyz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
                request(Route::Ready, false, false, 48),
            ),
            (
                "GET /metrics HTTP/1.1\r\n\r\n",
                request(Route::NotFound, false, false, 25),
            ),
            (
                "POST /readyz HTTP/1.1\r\n\r\n",
                request(Route::NotAllowed, false, false, 25),
            ),
            // A body the mirror does not read ends the connection after the answer.
            (
                "GET /readyz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
                request(Route::Ready, false, true, 43),
            ),
            ("GET /readyz HTTP/1.1\r\nHost:", Head::Partial),
            ("", Head::Partial),
            ("SSH-2.0-OpenSSH_9.2\r\n", Head::Bad),
        ];
        for (bytes, want) in rows {
            assert_eq!(read_head(bytes.as_bytes()), *want, "{bytes:?}");
        }
    }

    #[test]
    fn a_head_past_the_limit_is_too_large_complete_or_not() {
        let mut long = b"GET /readyz HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD, b'a');
        assert_eq!(read_head(&long), Head::TooLarge, "unfinished at the limit");
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(read_head(&long), Head::TooLarge, "finished past it");
        let many: String = (0..MAX_HEADERS + 1)
            .map(|i| format!("X{i}: y\r\n"))
            .collect();
        let many = format!("GET /readyz HTTP/1.1\r\n{many}\r\n");
        assert_eq!(read_head(many.as_bytes()), Head::TooLarge);
    }

    #[test]
    fn pipelined_requests_are_read_one_head_at_a_time() {
        let two = b"GET /readyz HTTP/1.1\r\n\r\nGET /livez HTTP/1.1\r\n\r\n";
        let Head::Request { len, .. } = read_head(two) else {
            panic!("the first head")
        };
        assert_eq!(
            read_head(&two[len..]),
            request(Route::Live, false, false, 23)
        );
    }

    #[test]
    fn a_head_can_end_only_where_a_blank_line_has_arrived() {
        assert!(may_end_head(b"Host: x\r\n\r\n"));
        assert!(may_end_head(b"\n\n"));
        assert!(!may_end_head(b"GET /readyz HTTP/1.1\r\nHost: x\r\n"));
        assert!(!may_end_head(b""));
    }

    #[test]
    fn answers_carry_their_length_and_say_when_they_close() {
        let mut out = Vec::new();
        answer(&mut out, 200, "ready", false, false);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 6\r\n\
             cache-control: no-store\r\n\r\nready\n"
        );
        let mut out = Vec::new();
        answer(&mut out, 405, "method not allowed", true, true);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(text.contains("allow: GET, HEAD\r\n") && text.contains("connection: close\r\n"));
        assert!(text.contains("content-length: 19\r\n") && text.ends_with("\r\n\r\n"));
    }
}
