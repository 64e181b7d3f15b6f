//! Parsing the attribute's arguments: `#[job(queue = "emails", retries = 5, …)]`.
//!
//! This step checks only the shape of each argument (known key, given once, literal of the right
//! kind); what the values mean is checked by `validate`.

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::parse::{ParseStream, Parser};
use syn::{Expr, ExprLit, ExprUnary, Ident, Lit, LitStr, Path, Token, UnOp};

/// Every key `#[job]` accepts, in the order the error message lists them.
const KEYS: &[&str] = &[
    "queue",
    "retries",
    "backoff",
    "timeout",
    "priority",
    "name",
    "ordering_key",
    "cron",
    "rate_limit",
    "rate_key",
    "crate",
];

/// Diagnostics collected along the pipeline, reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Records one more diagnostic.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// Records a diagnostic spanned on `tokens`.
    pub(crate) fn at(&mut self, tokens: impl quote::ToTokens, message: impl std::fmt::Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records a diagnostic at `span`.
    pub(crate) fn at_span(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    /// All diagnostics, if there were any.
    pub(crate) fn finish(self) -> Option<syn::Error> {
        self.0
    }
}

/// An integer argument, kept wide so that range errors can be reported by `validate`.
pub(crate) struct IntArg {
    /// The value; `None` when it does not even fit an `i128`.
    pub(crate) value: Option<i128>,
    /// The literal with its sign, to span diagnostics on.
    pub(crate) expr: Expr,
}

/// The attribute's arguments, each present at most once.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) queue: Option<LitStr>,
    pub(crate) retries: Option<IntArg>,
    pub(crate) backoff: Option<LitStr>,
    pub(crate) timeout: Option<LitStr>,
    pub(crate) priority: Option<IntArg>,
    pub(crate) name: Option<LitStr>,
    pub(crate) ordering_key: Option<Ident>,
    pub(crate) cron: Option<LitStr>,
    pub(crate) rate_limit: Option<LitStr>,
    /// Whether `rate_limit` was given at all, even with a value that was refused: `rate_key`
    /// then does not also report it missing.
    pub(crate) rate_limit_given: bool,
    pub(crate) rate_key: Option<Ident>,
    pub(crate) krate: Option<Path>,
}

/// Parses the attribute's arguments, recording every problem in `errors`.
pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Args {
    let mut args = Args::default();
    let mut seen: Vec<String> = Vec::new();
    let parser = syn::meta::parser(|meta| {
        let key = meta.path.clone();
        let name = path_name(&key);
        let has_eq = meta.input.peek(Token![=]);
        if has_eq {
            meta.input.parse::<Token![=]>()?;
        }
        let value = take_until_comma(meta.input)?;
        if !KEYS.contains(&name.as_str()) {
            errors.at(
                &key,
                format!(
                    "unknown `job` argument `{name}`; expected one of {}",
                    expected_keys()
                ),
            );
            return Ok(());
        }
        if seen.contains(&name) {
            errors.at(
                &key,
                format!("duplicate `job` argument `{name}`; give it once"),
            );
            return Ok(());
        }
        seen.push(name.clone());
        if name == "rate_limit" {
            args.rate_limit_given = true;
        }
        if !has_eq || value.is_empty() {
            errors.at(
                &key,
                format!("`{name}` needs a value, e.g. `{}`", example(&name)),
            );
            return Ok(());
        }
        let value = match syn::parse2::<Expr>(value.clone()) {
            Ok(expr) => expr,
            Err(_) => {
                errors.at(&value, expectation(&name));
                return Ok(());
            }
        };
        match name.as_str() {
            "queue" => set_once(&mut args.queue, string(&name, &value, errors)),
            "backoff" => set_once(&mut args.backoff, string(&name, &value, errors)),
            "timeout" => set_once(&mut args.timeout, string(&name, &value, errors)),
            "name" => set_once(&mut args.name, string(&name, &value, errors)),
            "cron" => set_once(&mut args.cron, string(&name, &value, errors)),
            "retries" => set_once(&mut args.retries, integer(&name, &value, errors)),
            "priority" => set_once(&mut args.priority, integer(&name, &value, errors)),
            "rate_limit" => set_once(&mut args.rate_limit, string(&name, &value, errors)),
            "ordering_key" | "rate_key" => {
                let ident = argument_name(&name, &value, errors);
                let slot = if name == "rate_key" {
                    &mut args.rate_key
                } else {
                    &mut args.ordering_key
                };
                set_once(slot, ident);
            }
            "crate" => {
                let path = string(&name, &value, errors).and_then(|lit| match lit.parse::<Path>() {
                    Ok(path) => Some(path),
                    Err(_) => {
                        errors.at(&lit, format!(
                            "`crate` expects the path of the mysqlq crate, e.g. `crate = \"::my_app::mysqlq\"`; `{}` is not a path",
                            lit.value()
                        ));
                        None
                    }
                });
                set_once(&mut args.krate, path);
            }
            _ => unreachable!("every key of KEYS is handled"),
        }
        Ok(())
    });
    if let Err(e) = parser.parse2(tokens) {
        errors.push(syn::Error::new(
            e.span(),
            format!("{e}; `job` arguments are written `key = value`, separated by commas"),
        ));
    }
    args
}

/// Stores the value of a key the caller has checked is not a duplicate.
fn set_once<T>(slot: &mut Option<T>, value: Option<T>) {
    debug_assert!(
        slot.is_none(),
        "duplicates are reported before values are stored"
    );
    if value.is_some() {
        *slot = value;
    }
}

fn path_name(path: &Path) -> String {
    match path.get_ident() {
        Some(ident) => ident.to_string(),
        None => quote::quote!(#path).to_string().replace(' ', ""),
    }
}

fn expected_keys() -> String {
    let quoted: Vec<String> = KEYS.iter().map(|k| format!("`{k}`")).collect();
    quoted.join(", ")
}

fn example(key: &str) -> &'static str {
    match key {
        "queue" => "queue = \"emails\"",
        "retries" => "retries = 5",
        "backoff" => "backoff = \"exp\"",
        "timeout" => "timeout = \"30s\"",
        "priority" => "priority = -10",
        "name" => "name = \"send_email\"",
        "ordering_key" => "ordering_key = customer_id",
        "cron" => "cron = \"*/5 * * * *\"",
        "rate_limit" => "rate_limit = \"10/s\"",
        "rate_key" => "rate_key = provider",
        _ => "crate = \"::my_app::mysqlq\"",
    }
}

fn expectation(key: &str) -> String {
    let what = match key {
        "retries" | "priority" => "an integer literal",
        "ordering_key" | "rate_key" => "the name of an argument",
        _ => "a string literal",
    };
    format!("`{key}` expects {what}, e.g. `{}`", example(key))
}

/// Collects the tokens of one value, up to the next top-level comma.
fn take_until_comma(input: ParseStream<'_>) -> syn::Result<TokenStream> {
    let mut tokens = TokenStream::new();
    while !input.is_empty() && !input.peek(Token![,]) {
        tokens.extend([input.parse::<TokenTree>()?]);
    }
    Ok(tokens)
}

fn string(key: &str, value: &Expr, errors: &mut Errors) -> Option<LitStr> {
    if let Expr::Lit(ExprLit {
        lit: Lit::Str(lit), ..
    }) = value
    {
        return Some(lit.clone());
    }
    // A bare number is no rate: quoting `rate_limit = 10` does not make it one.
    let hint = match value {
        Expr::Lit(_) | Expr::Unary(_) if key != "rate_limit" => "; add quotes",
        _ => "",
    };
    errors.at(value, format!("{}{hint}", expectation(key)));
    None
}

fn integer(key: &str, value: &Expr, errors: &mut Errors) -> Option<IntArg> {
    let (lit, negative) = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(lit), ..
        }) => (lit, false),
        Expr::Unary(ExprUnary {
            op: UnOp::Neg(_),
            expr,
            ..
        }) => match &**expr {
            Expr::Lit(ExprLit {
                lit: Lit::Int(lit), ..
            }) => (lit, true),
            _ => return int_error(key, value, errors),
        },
        _ => return int_error(key, value, errors),
    };
    let magnitude = lit.base10_parse::<i128>().ok();
    Some(IntArg {
        value: magnitude.map(|m| if negative { -m } else { m }),
        expr: value.clone(),
    })
}

fn int_error(key: &str, value: &Expr, errors: &mut Errors) -> Option<IntArg> {
    let hint = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) if s.value().trim().parse::<i128>().is_ok() => "; remove the quotes",
        _ => "",
    };
    errors.at(value, format!("{}{hint}", expectation(key)));
    None
}

/// The value of `ordering_key` or `rate_key` (`key`): an argument's name.
fn argument_name(key: &str, value: &Expr, errors: &mut Errors) -> Option<Ident> {
    if let Expr::Path(p) = value
        && p.qself.is_none()
        && p.attrs.is_empty()
        && let Some(ident) = p.path.get_ident()
    {
        return Some(ident.clone());
    }
    let message = match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) if syn::parse_str::<Ident>(&s.value()).is_ok() => {
            let fix = format!("remove the quotes: `{key} = {}`", s.value());
            // `rate_key`'s says only the fix; `ordering_key`'s keeps its example, as before.
            match key {
                "rate_key" => format!("`{key}` expects the name of an argument; {fix}"),
                _ => format!("{}; {fix}", expectation(key)),
            }
        }
        _ => expectation(key),
    };
    errors.at(value, message);
    None
}
