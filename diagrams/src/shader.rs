//! Small functions of a lesson's WGSL run on the CPU, so that a diagram shows what the shader
//! computes rather than a copy of it that could drift: naga parses the shader as the lesson
//! specialises it, and [`Shader::call`] evaluates one of its functions written in integer
//! arithmetic, `let`s, `if`s and `return`s (what lesson 10's orders of work are written in),
//! reading the uniform `params` from the values it is given. Anything else is an error that
//! names what it met.

use course::ANCHOR;
use std::collections::HashMap;

use naga::{
    BinaryOperator, Expression, Handle, Literal, MathFunction, ScalarKind, Statement, TypeInner,
    UnaryOperator,
};

/// A value of the functions [`Shader::call`] runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `u32`
    U32(u32),
    /// `i32`
    I32(i32),
    /// `bool`
    Bool(bool),
    /// A vector (`vec2<u32>`, ...).
    Vector(Vec<Value>),
}

impl Value {
    /// The `u32` this value is, or an error naming what it is.
    pub fn u32(&self) -> Result<u32, String> {
        match self {
            Value::U32(x) => Ok(*x),
            other => Err(format!("expected a u32, found {other:?}")),
        }
    }
}

/// What an expression evaluates to: a value, or a pointer to the uniform `params`, one of its
/// members or a local variable.
#[derive(Clone, Debug)]
enum Eval {
    Value(Value),
    Params,
    Member(String),
    Local(Handle<naga::LocalVariable>),
}

/// A parsed shader whose functions can be called.
pub struct Shader {
    module: naga::Module,
}

impl Shader {
    /// `source` parsed by naga.
    pub fn parse(source: &str) -> Result<Self, String> {
        let module = naga::front::wgsl::parse_str(source)
            .map_err(|e| format!("the shader does not parse: {}", e.emit_to_string(source)))?;
        Ok(Self { module })
    }

    /// The value of the constant `name`, as naga evaluates it (a `u32`, `i32` or `f32`).
    pub fn constant(&self, name: &str) -> Result<f64, String> {
        let (_, constant) = self
            .module
            .constants
            .iter()
            .find(|(_, c)| c.name.as_deref() == Some(name))
            .ok_or_else(|| format!("the shader declares no constant `{name}`"))?;
        match self.module.global_expressions[constant.init] {
            Expression::Literal(Literal::U32(x)) => Ok(f64::from(x)),
            Expression::Literal(Literal::I32(x)) => Ok(f64::from(x)),
            Expression::Literal(Literal::F32(x)) => Ok(f64::from(x)),
            ref other => Err(format!("constant `{name}` is {other:?}, not a number")),
        }
    }

    /// The `u32` constant `name`, as a `usize`.
    pub fn count(&self, name: &str) -> Result<usize, String> {
        let value = self.constant(name)?;
        if value >= 0.0 && value.fract() == 0.0 {
            Ok(value as usize)
        } else {
            Err(format!("constant `{name}` is {value}, not a count"))
        }
    }

    /// Runs the function `name` with `arguments`; `params` gives the members of the uniform
    /// `params` that it reads, by name.
    pub fn call(
        &self,
        name: &str,
        arguments: &[Value],
        params: &[(&str, u32)],
    ) -> Result<Value, String> {
        let (_, function) = self
            .module
            .functions
            .iter()
            .find(|(_, f)| f.name.as_deref() == Some(name))
            .ok_or_else(|| format!("the shader has no function `{name}`"))?;
        if function.arguments.len() != arguments.len() {
            return Err(format!(
                "`{name}` takes {} arguments, given {}",
                function.arguments.len(),
                arguments.len()
            ));
        }
        let mut run = Run {
            shader: self,
            function,
            name,
            arguments,
            params,
            values: HashMap::new(),
            locals: HashMap::new(),
        };
        run.block(&function.body)?.ok_or_else(|| format!("`{name}` returned no value"))
    }
}

/// One call of a function.
struct Run<'a> {
    shader: &'a Shader,
    function: &'a naga::Function,
    name: &'a str,
    arguments: &'a [Value],
    params: &'a [(&'a str, u32)],
    /// Expressions already evaluated: each once, where the function emits it (no loops).
    values: HashMap<Handle<Expression>, Eval>,
    /// Local variables (naga's lowering of `||` and `&&` stores into one).
    locals: HashMap<Handle<naga::LocalVariable>, Value>,
}

impl Run<'_> {
    /// Runs `block`: the value of the `return` it reaches, if any.
    fn block(&mut self, block: &naga::Block) -> Result<Option<Value>, String> {
        for statement in block.iter() {
            match statement {
                Statement::Emit(range) => {
                    for handle in range.clone() {
                        self.eval(handle)?;
                    }
                }
                Statement::Store { pointer, value } => {
                    let value = self.value(*value)?;
                    match self.eval(*pointer)? {
                        Eval::Local(local) => self.locals.insert(local, value),
                        other => return Err(self.unsupported(&format!("a store to {other:?}"))),
                    };
                }
                Statement::Block(inner) => {
                    if let Some(value) = self.block(inner)? {
                        return Ok(Some(value));
                    }
                }
                Statement::If { condition, accept, reject } => {
                    let taken = match self.value(*condition)? {
                        Value::Bool(b) => b,
                        other => return Err(self.unsupported(&format!("an `if` on {other:?}"))),
                    };
                    if let Some(value) = self.block(if taken { accept } else { reject })? {
                        return Ok(Some(value));
                    }
                }
                Statement::Return { value: Some(value) } => return Ok(Some(self.value(*value)?)),
                other => return Err(self.unsupported(&format!("the statement {other:?}"))),
            }
        }
        Ok(None)
    }

    fn unsupported(&self, what: &str) -> String {
        format!("`{}`: the diagrams' evaluator does not run {what}", self.name)
    }

    /// The value of `handle`, which must not be a pointer.
    fn value(&mut self, handle: Handle<Expression>) -> Result<Value, String> {
        match self.eval(handle)? {
            Eval::Value(value) => Ok(value),
            pointer => Err(self.unsupported(&format!("a pointer used as a value ({pointer:?})"))),
        }
    }

    fn eval(&mut self, handle: Handle<Expression>) -> Result<Eval, String> {
        if let Some(known) = self.values.get(&handle) {
            return Ok(known.clone());
        }
        let result = match &self.function.expressions[handle] {
            Expression::Literal(literal) => Eval::Value(literal_value(literal)?),
            Expression::Constant(constant) => {
                let init = self.shader.module.constants[*constant].init;
                match &self.shader.module.global_expressions[init] {
                    Expression::Literal(literal) => Eval::Value(literal_value(literal)?),
                    other => return Err(self.unsupported(&format!("the constant {other:?}"))),
                }
            }
            Expression::FunctionArgument(index) => {
                Eval::Value(self.arguments[*index as usize].clone())
            }
            Expression::GlobalVariable(global) => {
                let variable = &self.shader.module.global_variables[*global];
                if variable.name.as_deref() == Some("params") {
                    Eval::Params
                } else {
                    return Err(self.unsupported(&format!("the global {:?}", variable.name)));
                }
            }
            Expression::AccessIndex { base, index } => match self.eval(*base)? {
                Eval::Params => Eval::Member(self.member_name(*index)?),
                Eval::Value(Value::Vector(items)) => Eval::Value(
                    items
                        .get(*index as usize)
                        .cloned()
                        .ok_or_else(|| self.unsupported("an index past a vector's end"))?,
                ),
                other => return Err(self.unsupported(&format!("an index into {other:?}"))),
            },
            Expression::LocalVariable(local) => {
                if let Some(init) = self.function.local_variables[*local].init
                    && !self.locals.contains_key(local)
                {
                    let value = self.value(init)?;
                    self.locals.insert(*local, value);
                }
                Eval::Local(*local)
            }
            Expression::Load { pointer } => match self.eval(*pointer)? {
                Eval::Local(local) => Eval::Value(
                    self.locals
                        .get(&local)
                        .cloned()
                        .ok_or_else(|| format!("`{}` reads a variable never set", self.name))?,
                ),
                Eval::Member(member) => {
                    let (_, value) =
                        self.params.iter().find(|(name, _)| *name == member).ok_or_else(|| {
                            format!("`{}` reads params.{member}, which was not given", self.name)
                        })?;
                    Eval::Value(Value::U32(*value))
                }
                other => return Err(self.unsupported(&format!("a load of {other:?}"))),
            },
            Expression::Compose { components, .. } => {
                let items = components.iter().map(|&c| self.value(c)).collect::<Result<_, _>>()?;
                Eval::Value(Value::Vector(items))
            }
            Expression::Unary { op, expr } => {
                let value = self.value(*expr)?;
                Eval::Value(match (op, value) {
                    (UnaryOperator::LogicalNot, Value::Bool(b)) => Value::Bool(!b),
                    (UnaryOperator::Negate, Value::I32(x)) => Value::I32(x.wrapping_neg()),
                    (op, value) => {
                        return Err(self.unsupported(&format!("{op:?} of {value:?}")));
                    }
                })
            }
            Expression::Binary { op, left, right } => {
                let (left, right) = (self.value(*left)?, self.value(*right)?);
                Eval::Value(binary(*op, &left, &right).ok_or_else(|| {
                    self.unsupported(&format!("{op:?} of {left:?} and {right:?}"))
                })?)
            }
            Expression::Select { condition, accept, reject } => {
                let taken = match self.value(*condition)? {
                    Value::Bool(b) => b,
                    other => return Err(self.unsupported(&format!("a select on {other:?}"))),
                };
                Eval::Value(self.value(if taken { *accept } else { *reject })?)
            }
            Expression::Math { fun, arg, arg1, arg2, .. } => {
                let x = self.value(*arg)?;
                let mut more = |arg: &Option<Handle<Expression>>| match arg {
                    Some(a) => self.value(*a),
                    None => Err(self.unsupported(&format!("{fun:?} with too few arguments"))),
                };
                let result = match fun {
                    MathFunction::Max => extreme(&x, &more(arg1)?, true),
                    MathFunction::Min => extreme(&x, &more(arg1)?, false),
                    MathFunction::Clamp => {
                        let (low, high) = (more(arg1)?, more(arg2)?);
                        extreme(&x, &low, true).and_then(|v| extreme(&v, &high, false))
                    }
                    _ => None,
                };
                Eval::Value(result.ok_or_else(|| self.unsupported(&format!("{fun:?} of {x:?}")))?)
            }
            Expression::As { expr, kind, convert: Some(4) } => {
                let value = self.value(*expr)?;
                Eval::Value(match (kind, value) {
                    (ScalarKind::Sint, Value::U32(x)) => Value::I32(x as i32),
                    (ScalarKind::Uint, Value::I32(x)) => Value::U32(x as u32),
                    (ScalarKind::Sint, Value::I32(x)) => Value::I32(x),
                    (ScalarKind::Uint, Value::U32(x)) => Value::U32(x),
                    (kind, value) => {
                        return Err(
                            self.unsupported(&format!("a conversion of {value:?} to {kind:?}"))
                        );
                    }
                })
            }
            other => return Err(self.unsupported(&format!("the expression {other:?}"))),
        };
        self.values.insert(handle, result.clone());
        Ok(result)
    }

    /// The name of member `index` of `params`' struct.
    fn member_name(&self, index: u32) -> Result<String, String> {
        let module = &self.shader.module;
        let (_, params) = module
            .global_variables
            .iter()
            .find(|(_, v)| v.name.as_deref() == Some("params"))
            .ok_or_else(|| self.unsupported("a shader without `params`"))?;
        match &module.types[params.ty].inner {
            TypeInner::Struct { members, .. } => members
                .get(index as usize)
                .and_then(|m| m.name.clone())
                .ok_or_else(|| self.unsupported(&format!("member {index} of params"))),
            _ => Err(self.unsupported("a `params` that is not a struct")),
        }
    }
}

fn literal_value(literal: &Literal) -> Result<Value, String> {
    match *literal {
        Literal::U32(x) => Ok(Value::U32(x)),
        Literal::I32(x) => Ok(Value::I32(x)),
        Literal::Bool(b) => Ok(Value::Bool(b)),
        ref other => Err(format!("the diagrams' evaluator does not run the literal {other:?}")),
    }
}

/// The larger (`max`) or the smaller of two integers of one type.
fn extreme(a: &Value, b: &Value, max: bool) -> Option<Value> {
    match (a, b) {
        (Value::U32(a), Value::U32(b)) => Some(Value::U32(if max { *a.max(b) } else { *a.min(b) })),
        (Value::I32(a), Value::I32(b)) => Some(Value::I32(if max { *a.max(b) } else { *a.min(b) })),
        _ => None,
    }
}

/// `left op right` as WGSL defines it for `u32`, `i32` and `bool` (integers wrap; an integer
/// divided by 0 is itself, its remainder 0).
fn binary(op: BinaryOperator, left: &Value, right: &Value) -> Option<Value> {
    use BinaryOperator as B;
    Some(match (left, right) {
        (Value::U32(a), Value::U32(b)) => {
            let (a, b) = (*a, *b);
            match op {
                B::Add => Value::U32(a.wrapping_add(b)),
                B::Subtract => Value::U32(a.wrapping_sub(b)),
                B::Multiply => Value::U32(a.wrapping_mul(b)),
                B::Divide => Value::U32(a.checked_div(b).unwrap_or(a)),
                B::Modulo => Value::U32(a.checked_rem(b).unwrap_or(0)),
                _ => Value::Bool(compare(op, a.cmp(&b))?),
            }
        }
        (Value::I32(a), Value::I32(b)) => {
            let (a, b) = (*a, *b);
            match op {
                B::Add => Value::I32(a.wrapping_add(b)),
                B::Subtract => Value::I32(a.wrapping_sub(b)),
                B::Multiply => Value::I32(a.wrapping_mul(b)),
                B::Divide => Value::I32(if b == 0 { a } else { a.wrapping_div(b) }),
                B::Modulo => Value::I32(if b == 0 { 0 } else { a.wrapping_rem(b) }),
                _ => Value::Bool(compare(op, a.cmp(&b))?),
            }
        }
        (Value::Bool(a), Value::Bool(b)) => Value::Bool(match op {
            B::LogicalAnd | B::And => *a && *b,
            B::LogicalOr | B::InclusiveOr => *a || *b,
            B::Equal => a == b,
            B::NotEqual => a != b,
            _ => return None,
        }),
        _ => return None,
    })
}

fn compare(op: BinaryOperator, order: std::cmp::Ordering) -> Option<bool> {
    use BinaryOperator as B;
    use std::cmp::Ordering::{Greater, Less};
    Some(match op {
        B::Equal => order.is_eq(),
        B::NotEqual => order.is_ne(),
        B::Less => order == Less,
        B::LessEqual => order != Greater,
        B::Greater => order == Greater,
        B::GreaterEqual => order != Less,
        _ => return None,
    })
}

/// The lines of `source` between the start and end marks of the anchor `name` (mdBook's
/// marks, spelled by [`course::ANCHOR`] so that no mark with a name appears here).
pub fn anchored<'a>(source: &'a str, name: &str) -> Result<&'a str, String> {
    let start_mark = format!("// {ANCHOR}: {name}\n");
    let end_mark = format!("// {ANCHOR}_END: {name}");
    let start = source
        .find(&start_mark)
        .map(|i| i + start_mark.len())
        .ok_or_else(|| format!("the shader has no `{}`", start_mark.trim_end()))?;
    let end = source[start..]
        .find(&end_mark)
        .map(|i| start + i)
        .ok_or_else(|| format!("the shader has no `{end_mark}`"))?;
    Ok(&source[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = "
struct Params { a: u32, b: u32 }
@group(0) @binding(0) var<uniform> params: Params;
const TWICE: u32 = 2u * 3u;
fn f(x: u32, v: vec2<u32>) -> vec2<u32> {
    if params.b == 0u || x == 99u {
        return v;
    }
    let y = max(x, TWICE) % params.a;
    let s = u32(clamp(i32(x) - 10, 0, 4));
    return vec2<u32>(select(y, v.y - 1u, x > 7u), s);
}
";

    fn call(x: u32, b: u32) -> Result<Value, String> {
        let shader = Shader::parse(SOURCE)?;
        shader.call(
            "f",
            &[Value::U32(x), Value::Vector(vec![Value::U32(5), Value::U32(9)])],
            &[("a", 4), ("b", b)],
        )
    }

    fn pair(a: u32, b: u32) -> Value {
        Value::Vector(vec![Value::U32(a), Value::U32(b)])
    }

    #[test]
    fn integer_functions_run_as_wgsl_defines_them() {
        assert_eq!(call(3, 1).unwrap(), pair(2, 0)); // max(3, 6) % 4, clamp(-7) = 0
        assert_eq!(call(13, 1).unwrap(), pair(8, 3)); // x > 7: v.y - 1; clamp(3)
        assert_eq!(call(13, 0).unwrap(), pair(5, 9)); // params.b == 0: v
        assert_eq!(call(99, 1).unwrap(), pair(5, 9)); // x == 99: v (`||` goes through a var)
        assert_eq!(Shader::parse(SOURCE).unwrap().count("TWICE").unwrap(), 6);
    }

    #[test]
    fn what_it_cannot_run_is_an_error_naming_it() {
        let shader = Shader::parse(SOURCE).unwrap();
        let err = shader.call("f", &[Value::U32(1), pair(0, 0)], &[("b", 1)]).unwrap_err();
        assert!(err.contains("params.a, which was not given"), "{err}");
        let err = shader.call("g", &[], &[]).unwrap_err();
        assert!(err.contains("no function `g`"), "{err}");
        let looped =
            "fn g() -> u32 { var t = 0u; loop { t += 1u; if t > 3u { break; } } return t; }";
        let err = Shader::parse(looped).unwrap().call("g", &[], &[]).unwrap_err();
        assert!(err.contains("does not run"), "{err}");
    }

    #[test]
    fn an_anchor_s_lines_are_found() {
        let text = format!("a\n// {ANCHOR}: x\nb\nc\n// {ANCHOR}_END: x\nd");
        assert_eq!(anchored(&text, "x").unwrap(), "b\nc\n");
        assert!(anchored(&text, "y").unwrap_err().contains(&format!("{ANCHOR}: y")));
    }
}
