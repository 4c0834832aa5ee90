//! The contract's value types: names, ids, tokens, terms, owners, members.

mod clock;
pub mod limits;
mod metadata;
mod name;
mod session_id;
mod term;

pub use clock::{Clock, ManualClock, SystemClock};
pub use metadata::Metadata;
pub use name::{GroupName, LeaseName, MAX_NAME_LEN};
pub use session_id::SessionId;
pub use term::{check_value, Member, Owner, Term, Token, MAX_VALUE_LEN};
