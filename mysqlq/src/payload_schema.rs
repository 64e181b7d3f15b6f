//! The JSON Schema of a job's payload: what `#[job]` generates for [`Job::payload_schema`]
//! (through the probes `__private` re-exports) and what a hand-written job opts in with
//! ([`payload_schema_of`]). Draft 2020-12, for the deserializing side: the payloads a worker
//! decodes.
//!
//! [`Job::payload_schema`]: crate::Job::payload_schema

use std::marker::PhantomData;

use schemars::{JsonSchema, Schema, SchemaGenerator, generate::SchemaSettings};
use serde::de::{DeserializeOwned, Deserializer, Visitor};
use serde_json::{Map, Value};

/// The JSON Schema (draft 2020-12) of `T` as a payload, for a hand-written
/// [`Job`](crate::Job) that derives [`JsonSchema`](schemars::JsonSchema) on its struct:
///
/// ```
/// use mysqlq::schemars::{self, JsonSchema};
///
/// #[derive(serde::Serialize, serde::Deserialize, JsonSchema)]
/// #[schemars(crate = "mysqlq::schemars")]
/// struct Resize {
///     image_id: u64,
///     width: Option<u32>,
/// }
///
/// impl mysqlq::Job for Resize {
///     const KIND: &'static str = "resize";
///
///     fn payload_schema() -> Option<serde_json::Value> {
///         Some(mysqlq::payload_schema_of::<Self>())
///     }
///
///     async fn run(self, _ctx: mysqlq::JobContext) -> Result<(), mysqlq::JobError> {
///         Ok(())
///     }
/// }
///
/// let schema = <Resize as mysqlq::Job>::payload_schema().unwrap();
/// assert_eq!(schema["required"], serde_json::json!(["image_id"]));
/// ```
pub fn payload_schema_of<T: JsonSchema>() -> Value {
    generator().into_root_schema_for::<T>().to_value()
}

/// The generator of every payload schema: draft 2020-12, shared definitions under `$defs`.
fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator()
}

/// One argument of a `#[job]` function, as its generated `payload_schema` describes it.
pub struct Argument {
    /// The argument's name (the payload's key).
    pub name: &'static str,
    /// Its schema: [`JsonSchema`]'s when the type has one, else any JSON value.
    pub schema: fn(&mut SchemaGenerator) -> Schema,
    /// Whether a payload may leave it out (an `Option`).
    pub optional: fn() -> bool,
}

/// The schema `#[job]` generates: an object of `arguments`, titled with the job's kind and
/// described by the function's doc comment.
pub fn object_schema(kind: &str, description: Option<&str>, arguments: &[Argument]) -> Value {
    let mut generator = generator();
    let mut properties = Map::new();
    let mut required = Vec::new();
    for a in arguments {
        properties.insert(a.name.to_owned(), (a.schema)(&mut generator).to_value());
        if !(a.optional)() {
            required.push(Value::from(a.name));
        }
    }
    let mut schema = Map::new();
    schema.insert(
        "$schema".into(),
        "https://json-schema.org/draft/2020-12/schema".into(),
    );
    schema.insert("title".into(), kind.into());
    if let Some(d) = description {
        schema.insert("description".into(), d.into());
    }
    schema.insert("type".into(), "object".into());
    schema.insert("properties".into(), properties.into());
    schema.insert("required".into(), required.into());
    let defs = generator.take_definitions(true);
    if !defs.is_empty() {
        schema.insert("$defs".into(), defs.into());
    }
    schema.into()
}

/// The schema of an argument whose type does not implement [`JsonSchema`]: any JSON value
/// (the worker's decoding decides), described by the Rust type's name.
fn any_value(type_name: &str) -> Schema {
    let mut schema = Schema::default();
    schema.insert(
        "description".into(),
        format!(
            "any JSON that decodes as the Rust type `{type_name}` (it has no JSON Schema: \
             derive `mysqlq::schemars::JsonSchema` on it to describe it)"
        )
        .into(),
    );
    schema
}

/// Whether a payload may leave out a field of type `T`: a missing field decodes as serde's
/// derive decodes it (`None` for an `Option`), so the schema's `required` is the decoding's.
fn accepts_missing<T: DeserializeOwned>() -> bool {
    T::deserialize(Missing).is_ok()
}

/// A field that is not there, as serde's derive presents it to the field's type: `None` to an
/// `Option`, an error to anything else.
struct Missing;

impl<'de> Deserializer<'de> for Missing {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("missing"))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_none()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

/// Autoref specialisation of an argument type `T` in generated code: `(&&Probe::<T>::NEW)`
/// picks the most specific of [`ViaJsonSchema`] and [`ViaAnyValue`] (and of
/// [`ViaDeserialize`] and [`ViaAnyType`]), so a type without `JsonSchema` still compiles.
pub struct Probe<T>(PhantomData<fn() -> T>);

impl<T> Probe<T> {
    /// The probe of `T`.
    pub const NEW: Self = Self(PhantomData);
}

/// A type with a JSON Schema: its own.
pub trait ViaJsonSchema {
    /// The argument's schema.
    fn __mysqlq_schema(&self, generator: &mut SchemaGenerator, type_name: &str) -> Schema;
}
impl<T: JsonSchema> ViaJsonSchema for &Probe<T> {
    fn __mysqlq_schema(&self, generator: &mut SchemaGenerator, _: &str) -> Schema {
        generator.subschema_for::<T>()
    }
}

/// Any other type: any JSON value.
pub trait ViaAnyValue {
    /// The argument's schema.
    fn __mysqlq_schema(&self, generator: &mut SchemaGenerator, type_name: &str) -> Schema;
}
impl<T> ViaAnyValue for Probe<T> {
    fn __mysqlq_schema(&self, _: &mut SchemaGenerator, type_name: &str) -> Schema {
        any_value(type_name)
    }
}

/// A type that decodes: optional when it decodes from a missing field.
pub trait ViaDeserialize {
    /// Whether the payload may leave the argument out.
    fn __mysqlq_optional(&self) -> bool;
}
impl<T: DeserializeOwned> ViaDeserialize for &Probe<T> {
    fn __mysqlq_optional(&self) -> bool {
        accepts_missing::<T>()
    }
}

/// A type that does not decode (the compiler reports it at the argument's assertion; this only
/// keeps the error from being reported twice).
pub trait ViaAnyType {
    /// Whether the payload may leave the argument out.
    fn __mysqlq_optional(&self) -> bool;
}
impl<T> ViaAnyType for Probe<T> {
    fn __mysqlq_optional(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_decodes_from_a_missing_field_is_optional() {
        assert!(accepts_missing::<Option<String>>());
        assert!(accepts_missing::<Option<Vec<u64>>>());
        assert!(!accepts_missing::<String>());
        assert!(!accepts_missing::<u64>());
        assert!(!accepts_missing::<()>());
        assert!(!accepts_missing::<Value>());
        assert!(!accepts_missing::<Vec<u8>>());
    }

    struct Opaque;

    // The borrows are the generated code's: they pick the impl.
    #[allow(clippy::needless_borrow)]
    #[test]
    fn probes_pick_the_schema_of_a_type_that_has_one() {
        let mut g = generator();
        let s = (&&Probe::<u32>::NEW).__mysqlq_schema(&mut g, "u32");
        assert_eq!(s.get("type"), Some(&Value::from("integer")));
        let s = (&&Probe::<Opaque>::NEW).__mysqlq_schema(&mut g, "Opaque");
        assert!(s.get("type").is_none());
        assert!(
            s.get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| d.contains("`Opaque`")),
            "{s:?}"
        );
        assert!((&&Probe::<Option<u8>>::NEW).__mysqlq_optional());
        assert!(!(&&Probe::<u8>::NEW).__mysqlq_optional());
        assert!(!(&&Probe::<Opaque>::NEW).__mysqlq_optional());
    }
}
