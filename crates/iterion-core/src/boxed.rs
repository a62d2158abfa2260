//! The two boxed types both seams carry: a byte stream (archives, file
//! contents, stdin) and an error source (an engine's or a database's error
//! behind a core error, so no client type reaches a core signature). A leaf:
//! the driver and the store seams name it, it names neither.

/// A boxed, sendable stream of byte chunks (tar archives, file contents, stdin).
pub type ByteStream = std::pin::Pin<
    Box<dyn futures_core::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static>,
>;

/// Boxed error source (engine client errors stay out of core signatures).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
