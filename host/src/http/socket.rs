//! A connection's socket as the server hands it to hyper: it tells whether a write had to
//! wait, and gives hyper's own error answers a JSON body; and the marks that say which of the
//! connection's requests are still being answered.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use hyper::body::{Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Counts a connection's requests from the service call until their answer's body has all
/// been handed to hyper (then dropped).
pub(super) struct Answering(Arc<AtomicUsize>);

impl Answering {
    pub(super) fn enter(count: &Arc<AtomicUsize>) -> Answering {
        count.fetch_add(1, Ordering::SeqCst);
        Answering(Arc::clone(count))
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An answer's body, which holds its request's [`Answering`] mark until hyper drops it.
pub(super) struct TrackedBody {
    pub(super) body: Body,
    pub(super) _answering: Answering,
}

impl hyper::body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket, which remembers whether its last write had to wait: hyper then
/// still holds answer bytes it has taken from a body already dropped.
///
/// It also gives hyper's own answers a body. A request hyper cannot read (a malformed head,
/// headers past its limits, a target past 64 KiB) never reaches the router: hyper answers
/// 400, 431 or 414 itself, with an empty body, and closes the connection. Written while no
/// request of the connection is being answered, in exactly hyper's form, such an answer is
/// replaced by the same status with a JSON error like every other (`hyper_error_answer`).
pub(super) struct Socket {
    pub(super) stream: TcpStream,
    pub(super) write_waiting: Arc<AtomicBool>,
    /// The connection's requests being answered (see [`Answering`]).
    pub(super) answering: Arc<AtomicUsize>,
    /// A replacement answer being written, and how much of it is: hyper's buffer is
    /// reported written once all of it is.
    pub(super) rewritten: Option<(Vec<u8>, usize)>,
}

impl Socket {
    fn track<T>(&self, poll: Poll<T>) -> Poll<T> {
        self.write_waiting
            .store(poll.is_pending(), Ordering::SeqCst);
        poll
    }

    /// Starts replacing `bytes` when they are hyper's own error answer.
    fn rewrite_if_hypers_answer(&mut self, bytes: &[u8]) {
        if self.rewritten.is_none() && self.answering.load(Ordering::SeqCst) == 0 {
            self.rewritten = hyper_error_answer(bytes).map(|answer| (answer, 0));
        }
    }

    /// Writes the replacement on; `Ready(Ok(consumed))` once all of it is written.
    fn poll_rewritten(
        &mut self,
        cx: &mut Context<'_>,
        consumed: usize,
    ) -> Poll<std::io::Result<usize>> {
        let Socket {
            stream, rewritten, ..
        } = self;
        while let Some((answer, written)) = rewritten.as_mut() {
            if *written == answer.len() {
                *rewritten = None;
                break;
            }
            match Pin::new(&mut *stream).poll_write(cx, &answer[*written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return self.track(Poll::Pending),
            }
        }
        self.track(Poll::Ready(Ok(consumed)))
    }
}

/// hyper's own answer to a request it could not read (`HTTP/1.1 400 Bad Request`,
/// `431 Request Header Fields Too Large` or `414 URI Too Long`, with only `connection:
/// close`, `content-length: 0` and `date`), as the same answer with a JSON error body;
/// `None` for anything else.
fn hyper_error_answer(bytes: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?.strip_suffix("\r\n\r\n")?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next()?;
    let (code, message) = match status_line {
        "HTTP/1.1 400 Bad Request" => (
            "invalid_request",
            "the request could not be read as HTTP/1.1 (a malformed request line or header)",
        ),
        "HTTP/1.1 431 Request Header Fields Too Large" => (
            "invalid_request",
            "the request's headers are more or larger than the server reads (at most 100 \
             headers, about 400 KiB in all)",
        ),
        "HTTP/1.1 414 URI Too Long" => (
            "uri_too_long",
            "the request target is longer than the server reads (64 KiB)",
        ),
        _ => return None,
    };
    let mut date = None;
    for line in lines {
        match line.split_once(": ")? {
            ("connection", "close") | ("content-length", "0") => {}
            ("date", value) => date = Some(value),
            _ => return None,
        }
    }
    let body = serde_json::json!({"error": {"code": code, "message": message}}).to_string();
    let mut answer = format!(
        "{status_line}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n",
        body.len()
    );
    if let Some(date) = date {
        answer.push_str(&format!("date: {date}\r\n"));
    }
    answer.push_str("\r\n");
    answer.push_str(&body);
    Some(answer.into_bytes())
}

impl AsyncRead for Socket {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.rewrite_if_hypers_answer(buf);
        if self.rewritten.is_some() {
            return self.poll_rewritten(cx, buf.len());
        }
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.track(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        // hyper's own answers are a short head alone.
        if total <= 512 && self.rewritten.is_none() {
            let head: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            self.rewrite_if_hypers_answer(&head);
        }
        if self.rewritten.is_some() {
            return self.poll_rewritten(cx, total);
        }
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.track(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.track(poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_own_error_answers_get_a_json_body_and_nothing_else_is_touched() {
        let canned = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\
                       content-length: 0\r\ndate: Thu, 26 Nov 2026 04:44:08 GMT\r\n\r\n";
        let answer = String::from_utf8(hyper_error_answer(canned).unwrap()).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"));
        assert!(head.contains("content-type: application/json"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(head.contains("date: Thu, 26 Nov 2026 04:44:08 GMT"));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "invalid_request");
        for other in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}",
        ] {
            assert_eq!(hyper_error_answer(other), None);
        }
    }
}
