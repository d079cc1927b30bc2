//! A reader that ends a stdio server's stream at its first line longer than a cap. MCP's stdio
//! transport is one JSON-RPC message per line; a server that writes a line of gigabytes (or
//! never a newline) would otherwise grow the reader's buffer, or leave a call waiting for its
//! timeout. The oversized line is never completed (what of it came in earlier reads is handed on
//! without its newline, which the SDK drops as an incomplete message); the stream reports EOF,
//! the SDK sees the connection close, every pending call fails at once, and the `tripped` flag
//! says why.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};

/// The wrapper.
pub(super) struct LineCap<R> {
    inner: R,
    cap: usize,
    since_newline: usize,
    tripped: Arc<AtomicBool>,
}

impl<R> LineCap<R> {
    /// Wraps `inner`; lines may be at most `cap` bytes. `tripped` is set when one was longer.
    pub(super) fn new(inner: R, cap: usize, tripped: Arc<AtomicBool>) -> Self {
        LineCap {
            inner,
            cap,
            since_newline: 0,
            tripped,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.tripped.load(Ordering::SeqCst) {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let mut run = this.since_newline;
                for (i, b) in buf.filled()[before..].iter().enumerate() {
                    if *b == b'\n' {
                        run = 0;
                    } else {
                        run += 1;
                        if run > this.cap {
                            // Hand on what came before the oversized line, then end.
                            let keep = before
                                + buf.filled()[before..before + i]
                                    .iter()
                                    .rposition(|b| *b == b'\n')
                                    .map_or(0, |p| p + 1);
                            buf.set_filled(keep);
                            this.tripped.store(true, Ordering::SeqCst);
                            return Poll::Ready(Ok(()));
                        }
                    }
                }
                this.since_newline = run;
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn lines_pass_until_one_is_too_long() {
        let mut input = b"short\nalso short\n".to_vec();
        input.extend(vec![b'x'; 100]);
        input.extend(b"\nafter\n");
        let flag = Arc::new(AtomicBool::new(false));
        let mut r = LineCap::new(&input[..], 20, flag.clone());
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        // The good lines whole; of the long one at most a part, never its end.
        assert!(out.starts_with(b"short\nalso short\n"), "{out:?}");
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 2);
        assert!(out.len() <= 17 + 20);
        assert!(flag.load(Ordering::SeqCst));

        let flag = Arc::new(AtomicBool::new(false));
        let mut r = LineCap::new(&b"a\nb\n"[..], 20, flag.clone());
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.unwrap();
        assert_eq!(out, b"a\nb\n");
        assert!(!flag.load(Ordering::SeqCst));
    }
}
