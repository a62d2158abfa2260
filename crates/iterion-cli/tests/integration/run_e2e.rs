//! (filled by its issue's end-to-end tests)
