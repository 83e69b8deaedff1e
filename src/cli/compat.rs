//! The tini and dumb-init compatibility variables, and lifeguard's own log-level twins.
#![forbid(unsafe_code)]

use crate::logging::Level;

/// Flags first; then `LIFEGUARD_VERBOSE` (a number, like repeated -v) or
/// `LIFEGUARD_QUIET`; then `TINI_VERBOSITY` (tini's 0-3 scale); then `DUMB_INIT_DEBUG`.
pub(super) fn log_level(
    verbose: u8,
    quiet: u8,
    lookup: &impl Fn(&str) -> Option<String>,
) -> Result<Level, String> {
    if verbose > 0 || quiet > 0 {
        return Ok(Level::from_verbosity(1 + verbose as i64 - quiet as i64));
    }
    let number =
        |name: &str| -> Result<Option<i64>, String> {
            match lookup(name).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => v.trim().parse().map(Some).map_err(|_| {
                    format!("invalid value '{v}' for {name}: expected a whole number")
                }),
            }
        };
    if let Some(n) = number("LIFEGUARD_VERBOSE")? {
        return Ok(Level::from_verbosity(1 + n));
    }
    let quiet = lookup("LIFEGUARD_QUIET").filter(|v| !v.trim().is_empty());
    if quiet
        .map(|v| super::values::boolean(&v).map_err(|e| format!("LIFEGUARD_QUIET: {e}")))
        .transpose()?
        == Some(true)
    {
        return Ok(Level::Error);
    }
    if let Some(n) = number("TINI_VERBOSITY")? {
        return Ok(Level::from_verbosity(n));
    }
    if truthy(lookup("DUMB_INIT_DEBUG")) {
        return Ok(Level::Debug);
    }
    Ok(Level::Notice)
}

/// A compatibility variable that is on when set (tini's, dumb-init's): off when empty
/// or one of the false forms, in any case (`0`, `false`, `no`, `off`).
pub(super) fn truthy(value: Option<String>) -> bool {
    value.is_some_and(|v| {
        let v = v.trim();
        !v.is_empty() && super::values::boolean(v) != Ok(false)
    })
}
