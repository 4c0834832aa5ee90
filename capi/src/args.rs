//! Arguments and results across the boundary: out-pointers, NUL-terminated strings, term
//! values in and out of the caller's buffers, fixed-size text fields.

use crate::status::{Fail, R};
use crate::types::simba_status::*;
use crate::types::SIMBA_MAX_VALUE_LEN;
use lease::Error;
use std::ffi::{c_char, CStr};
use std::time::Duration;

pub(crate) fn out<T>(p: *mut T, what: &str) -> R<*mut T> {
    if p.is_null() {
        Err(Fail::new(
            SIMBA_NULL_ARGUMENT,
            format!("the out-pointer `{what}` is NULL"),
        ))
    } else {
        Ok(p)
    }
}

/// Writes a result through an out-pointer checked by [`out`].
pub(crate) fn put<T>(p: *mut T, value: T) {
    // SAFETY: the caller checked `p` is non-NULL; the C contract says it is writable.
    unsafe { p.write(value) }
}

/// Writes a result through an optional out-pointer (NULL: not wanted).
pub(crate) fn put_opt<T>(p: *mut T, value: T) {
    if !p.is_null() {
        put(p, value);
    }
}

/// A NUL-terminated UTF-8 argument.
pub(crate) fn text<'a>(p: *const c_char, what: &str) -> R<&'a str> {
    if p.is_null() {
        return Err(Fail::new(
            SIMBA_NULL_ARGUMENT,
            format!("the string `{what}` is NULL"),
        ));
    }
    // SAFETY: the C contract: a NUL-terminated string, valid for the call.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|e| {
        Fail::new(
            SIMBA_INVALID_UTF8,
            format!("the string `{what}` is not UTF-8: {e}"),
        )
    })
}

/// A term value argument: `len` bytes of UTF-8 at `p` (NULL allowed when `len` is 0).
pub(crate) fn value_arg(p: *const c_char, len: usize) -> R<String> {
    if len == 0 {
        return Ok(String::new());
    }
    if p.is_null() {
        return Err(Fail::new(
            SIMBA_NULL_ARGUMENT,
            format!("the value is NULL but value_len is {len}"),
        ));
    }
    if len > SIMBA_MAX_VALUE_LEN {
        // Refused before reading it: no need to look at more than the limit.
        return Err(Error::InvalidValue {
            len,
            max: SIMBA_MAX_VALUE_LEN,
        }
        .into());
    }
    // SAFETY: the C contract: `len` readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    let s = std::str::from_utf8(bytes)
        .map_err(|e| Fail::new(SIMBA_INVALID_UTF8, format!("the value is not UTF-8: {e}")))?;
    Ok(s.to_owned())
}

/// Checks that a term value (or a fenced value's bytes) fits a caller's buffer (the rules of
/// the `buf, buf_len, out_value_len` arguments: NULL `buf` with `buf_len` 0 copies nothing). A buffer too
/// small gives `SIMBA_INVALID_ARGUMENT` with the value's length (without the NUL) in
/// `*out_value_len` unless that is NULL, as `snprintf` tells the length it needed.
pub(crate) fn check_value_buf(
    value: &(impl AsRef<[u8]> + ?Sized),
    buf: *mut c_char,
    buf_len: usize,
    out_value_len: *mut usize,
) -> R {
    if buf.is_null() {
        if buf_len != 0 {
            return Err(Fail::new(
                SIMBA_NULL_ARGUMENT,
                format!("buf is NULL but buf_len is {buf_len} (NULL needs 0)"),
            ));
        }
        return Ok(());
    }
    let value = value.as_ref();
    if buf_len <= value.len() {
        put_opt(out_value_len, value.len());
        return Err(Fail::new(
            SIMBA_INVALID_ARGUMENT,
            format!(
                "buf_len {buf_len} is too small for the value's {} bytes and the NUL \
                 (SIMBA_VALUE_LEN always suffices for a term value)",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// Copies text with a NUL into a non-NULL `buf` of `buf_len` bytes, or gives
/// `SIMBA_INVALID_ARGUMENT` (nothing written) if it does not fit.
pub(crate) fn put_text(text: &str, buf: *mut c_char, buf_len: usize) -> R {
    let bytes = text.as_bytes();
    if buf_len <= bytes.len() {
        return Err(Fail::new(
            SIMBA_INVALID_ARGUMENT,
            format!(
                "buf_len {buf_len} is too small for {} bytes",
                bytes.len() + 1
            ),
        ));
    }
    // SAFETY: `buf` holds `buf_len` > bytes.len() bytes by the C contract.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), buf, bytes.len());
        buf.add(bytes.len()).write(0);
    }
    Ok(())
}

/// Copies a term value checked by [`check_value_buf`] out: into `buf` (with a NUL) unless
/// it is NULL, its length into `*out_value_len` unless that is NULL.
pub(crate) fn put_value(
    value: &(impl AsRef<[u8]> + ?Sized),
    buf: *mut c_char,
    out_value_len: *mut usize,
) {
    let bytes = value.as_ref();
    if !buf.is_null() {
        // SAFETY: `buf` holds more than bytes.len() bytes (checked) by the C contract.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), buf, bytes.len());
            buf.add(bytes.len()).write(0);
        }
    }
    put_opt(out_value_len, bytes.len());
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Copies ASCII/UTF-8 text into a fixed NUL-terminated array (truncating, never splitting
/// the terminator off).
pub(crate) fn fill<const N: usize>(dst: &mut [c_char; N], s: &str) {
    *dst = [0; N];
    for (d, b) in dst.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b as c_char;
    }
}
