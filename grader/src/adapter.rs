//! Each exercise's adapter trait, declared once with [`exercise_trait!`]: the signatures of
//! what the learner writes appear in one place, and the same declaration gives a struct of
//! functions that implements the trait, through which the lesson (the reference solution) and
//! the learner's crate plug in with plain functions or closures. (The planted-bug mutants
//! implement the trait themselves.)

// ANCHOR: exercise_trait
/// Declares an exercise's adapter trait and `Functions`, which implements it by calling one
/// boxed function per method:
///
/// ```ignore
/// exercise_trait! {
///     /// What a solution of exercise 07 provides.
///     pub trait Exercise07;
///     /// `exp2` over f32.
///     fn exp2(x: f32) -> f32;
/// }
/// let lesson = Functions { exp2: Box::new(lesson07::exp2::exp2) };
/// ```
macro_rules! exercise_trait {
    (
        $(#[$meta:meta])*
        pub trait $trait:ident;
        $(
            $(#[$method_meta:meta])*
            fn $method:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
        )+
    ) => {
        $(#[$meta])*
        pub trait $trait {
            $(
                $(#[$method_meta])*
                fn $method(&self, $($arg: $ty),*) -> $ret;
            )+
        }

        #[doc = concat!("[`", stringify!($trait), "`] from one function per method.")]
        pub struct Functions {
            $(
                #[doc = concat!("`", stringify!($method), "`")]
                pub $method: Box<dyn Fn($($ty),*) -> $ret + Send + Sync>,
            )+
        }

        impl $trait for Functions {
            $(
                #[allow(clippy::too_many_arguments)]
                fn $method(&self, $($arg: $ty),*) -> $ret {
                    (self.$method)($($arg),*)
                }
            )+
        }
    };
}
// ANCHOR_END: exercise_trait

pub(crate) use exercise_trait;
