//! Streaming fix-up of archive entry names.
//!
//! Why: Podman 4.3 exports a volume mount point of a *stopped* container
//! with entries rooted at `/` (`/out.txt`) instead of Docker's
//! `<basename>/out.txt`. Read-back drains run exactly then (a killed
//! container, ADR-143), so every export goes through this adapter, which
//! renames `/x` to `<basename>/x` header by header without buffering the
//! archive. Docker never emits a leading `/`, so its streams pass unchanged.

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use iterion_core::ByteStream;

const BLOCK: usize = 512;

/// Wrap `inner` so absolute entry names are re-rooted under `basename`.
/// Entry data passes through as the engine's own chunks (no copy); only
/// 512-byte headers are assembled and rewritten.
pub(crate) fn reroot(inner: ByteStream, basename: String) -> ByteStream {
    let state = Rerooter {
        basename,
        cur: Bytes::new(),
        hdr: BytesMut::with_capacity(BLOCK),
        data_left: 0,
    };
    Box::pin(futures_util::stream::unfold(
        (inner, state, false),
        |(mut inner, mut st, mut ended)| async move {
            loop {
                if let Some(out) = st.next_output() {
                    return Some((Ok(out), (inner, st, ended)));
                }
                if ended {
                    if st.hdr.is_empty() {
                        return None;
                    }
                    // A truncated trailing header: hand it on unchanged.
                    let rest = st.hdr.split().freeze();
                    return Some((Ok(rest), (inner, st, ended)));
                }
                match inner.next().await {
                    Some(Ok(chunk)) => st.cur = chunk,
                    Some(Err(e)) => return Some((Err(e), (inner, st, true))),
                    None => ended = true,
                }
            }
        },
    ))
}

struct Rerooter {
    basename: String,
    /// Unconsumed rest of the current input chunk.
    cur: Bytes,
    /// A header being assembled across chunks.
    hdr: BytesMut,
    /// Bytes of entry data (padded to blocks) still to pass through.
    data_left: u64,
}

impl Rerooter {
    fn next_output(&mut self) -> Option<Bytes> {
        if self.cur.is_empty() {
            return None;
        }
        if self.data_left > 0 {
            let n = (self.data_left.min(self.cur.len() as u64)) as usize;
            self.data_left -= n as u64;
            return Some(self.cur.split_to(n));
        }
        let need = BLOCK - self.hdr.len();
        let take = need.min(self.cur.len());
        self.hdr.extend_from_slice(&self.cur.split_to(take));
        if self.hdr.len() < BLOCK {
            return None;
        }
        let mut header = self.hdr.split();
        if header.iter().all(|b| *b == 0) {
            return Some(header.freeze());
        }
        self.data_left = entry_size(&header).div_ceil(BLOCK as u64) * BLOCK as u64;
        fix_name(&mut header, &self.basename);
        Some(header.freeze())
    }
}

fn entry_size(h: &[u8]) -> u64 {
    let field = &h[124..136];
    if field[0] & 0x80 != 0 {
        // GNU base-256 encoding.
        return field[1..]
            .iter()
            .fold(0u64, |acc, b| acc.wrapping_shl(8) | u64::from(*b));
    }
    let text: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    u64::from_str_radix(text.trim(), 8).unwrap_or(0)
}

fn fix_name(h: &mut [u8], basename: &str) {
    let name_end = h[..100].iter().position(|b| *b == 0).unwrap_or(100);
    if name_end == 0 || h[0] != b'/' {
        return;
    }
    let rest = String::from_utf8_lossy(&h[1..name_end]).into_owned();
    let new = if rest.is_empty() {
        format!("{basename}/")
    } else {
        format!("{basename}/{rest}")
    };
    if new.len() > 100 {
        // Too long for the plain name field; leave it (the consumer refuses
        // absolute names by rule, never writes them).
        return;
    }
    h[..100].fill(0);
    h[..new.len()].copy_from_slice(new.as_bytes());
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn raw_tar(names: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        for name in names {
            let mut h = tar::Header::new_old();
            let bytes = name.as_bytes();
            h.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
            h.set_size(3);
            h.set_mode(0o644);
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            let mut data = b"abc".to_vec();
            data.resize(512, 0);
            out.extend_from_slice(&data);
        }
        out.extend_from_slice(&[0u8; 1024]);
        out
    }

    async fn run(input: Vec<u8>, piece: usize) -> Vec<u8> {
        let chunks: Vec<Result<Bytes, std::io::Error>> = input
            .chunks(piece)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mut s = reroot(Box::pin(futures_util::stream::iter(chunks)), "files".into());
        let mut out = Vec::new();
        while let Some(c) = s.next().await {
            out.extend_from_slice(&c.expect("chunk"));
        }
        out
    }

    #[tokio::test]
    async fn reroots_absolute_names_in_any_chunking() {
        for piece in [1, 7, 512, 4096] {
            let out = run(raw_tar(&["/out.txt", "rel.txt", "/d/x"]), piece).await;
            let mut ar = tar::Archive::new(out.as_slice());
            let mut names = Vec::new();
            for e in ar.entries().expect("entries") {
                let mut e = e.expect("entry");
                let mut data = String::new();
                e.read_to_string(&mut data).expect("read");
                assert_eq!(data, "abc");
                names.push(e.path().expect("p").display().to_string());
            }
            assert_eq!(
                names,
                vec!["files/out.txt", "rel.txt", "files/d/x"],
                "piece {piece}"
            );
        }
    }
}
