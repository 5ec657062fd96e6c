//! Cross-crate integration tests live in the `[[test]]` targets of this crate; the library is empty.
