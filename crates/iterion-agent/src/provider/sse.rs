//! An incremental server-sent-events decoder (the WHATWG framing: `event:`
//! and `data:` lines, a blank line dispatches, `:` starts a comment).
//! Hand-written because the framing is four rules and the available crates
//! tie it to a `Stream` type we do not otherwise need; it works on byte
//! chunks as reqwest hands them over, whatever their boundaries.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// `event:` field (empty when absent).
    pub event: String,
    /// `data:` lines joined by `\n`.
    pub data: String,
}

/// Bytes larger than this without a line end make the stream garbage (a
/// provider line is a JSON object; this bounds memory on a hostile peer).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Feeds chunks, yields complete events.
#[derive(Debug, Default)]
pub struct Decoder {
    pending: Vec<u8>,
    current: Event,
    has_data: bool,
    overflow: bool,
}

impl Decoder {
    /// Append a chunk and return the events it completed.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.pending.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(pos) = self.pending.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.pending.drain(..=pos).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line(&String::from_utf8_lossy(&line), &mut out);
        }
        if self.pending.len() > MAX_LINE {
            self.overflow = true;
            self.pending.clear();
        }
        out
    }

    /// End of stream: a final event without its blank line still counts.
    pub fn finish(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.line(&String::from_utf8_lossy(&rest), &mut out);
        }
        self.line("", &mut out);
        if self.overflow {
            out.push(Event {
                event: "error".to_owned(),
                data: r#"{"type":"error","error":{"type":"garbage","message":"event line over 16 MiB"}}"#.to_owned(),
            });
        }
        out
    }

    fn line(&mut self, line: &str, out: &mut Vec<Event>) {
        if line.is_empty() {
            if self.has_data || !self.current.event.is_empty() {
                out.push(std::mem::take(&mut self.current));
            }
            self.has_data = false;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.current.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_anywhere_yields_same_events() {
        let stream = b"event: message_start\ndata: {\"a\":1}\n\n: ping\r\n\r\ndata: x\ndata: y\n\ndata: [DONE]";
        for cut in 0..stream.len() {
            let mut d = Decoder::default();
            let mut got = d.feed(&stream[..cut]);
            got.extend(d.feed(&stream[cut..]));
            got.extend(d.finish());
            assert_eq!(
                got,
                vec![
                    Event {
                        event: "message_start".into(),
                        data: "{\"a\":1}".into()
                    },
                    Event {
                        event: String::new(),
                        data: "x\ny".into()
                    },
                    Event {
                        event: String::new(),
                        data: "[DONE]".into()
                    },
                ],
                "cut at {cut}"
            );
        }
    }
}
