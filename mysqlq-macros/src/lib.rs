//! The `#[job]` attribute of mysqlq. Use it as `mysqlq::job`, where it is documented.
//!
//! The work is a pipeline: `args` parses the attribute, `validate` checks the function and
//! the values, `expand` generates the code. Every diagnostic is collected and reported at once.

use proc_macro::TokenStream;

mod args;
mod duration;
mod expand;
mod rate;
mod validate;

/// Turns an `async fn` into a mysqlq job. Documented at `mysqlq::job`.
#[proc_macro_attribute]
pub fn job(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::job(attr.into(), item.into()).into()
}
