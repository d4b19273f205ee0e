// Parameter trees: a DistArray (a leaf, of any element type), or a std::vector, std::array,
// std::tuple or std::map<std::string, ...> of trees, nested, or a struct declared a tree with
// DAX_TREE. tree_map / tree_for_each walk the leaves in one fixed order and name each by its path
// ("layers/0/w"), which optimizers and checkpoints use.
#pragma once

#include <array>
#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dax/array/dist_array.hpp>
#include <dax/core/error.hpp>
#include <dax/core/preprocessor.hpp>

namespace dax {
namespace detail {

/// One member of a struct tree: its name (the path component) and where it lives.
template <class S, class M>
struct TreeField {
  const char* name;
  M S::*member;
};

template <class T> struct is_tree_leaf : std::false_type {};
template <class E> struct is_tree_leaf<DistArray<E>> : std::true_type {};
template <class T> struct is_tree_vector : std::false_type {};
template <class T> struct is_tree_vector<std::vector<T>> : std::true_type {};
template <class T> struct is_tree_array : std::false_type {};
template <class T, size_t N> struct is_tree_array<std::array<T, N>> : std::true_type {};
template <class T> struct is_tree_tuple : std::false_type {};
template <class... T> struct is_tree_tuple<std::tuple<T...>> : std::true_type {};
template <class T> struct is_tree_map : std::false_type {};
template <class T> struct is_tree_map<std::map<std::string, T>> : std::true_type {};

/// A struct declared with DAX_TREE (found by argument-dependent lookup in the struct's namespace).
template <class T>
concept TreeRecord = requires { dax_tree_fields(static_cast<const T*>(nullptr)); };

enum class TreeKind { none, leaf, vector, array, tuple, map, record };

template <class T>
constexpr TreeKind tree_kind() {
  using B = std::remove_cvref_t<T>;
  if constexpr (is_tree_leaf<B>::value) return TreeKind::leaf;
  else if constexpr (is_tree_vector<B>::value) return TreeKind::vector;
  else if constexpr (is_tree_array<B>::value) return TreeKind::array;
  else if constexpr (is_tree_tuple<B>::value) return TreeKind::tuple;
  else if constexpr (is_tree_map<B>::value) return TreeKind::map;
  else if constexpr (TreeRecord<B>) return TreeKind::record;
  else return TreeKind::none;
}

template <class T>
using tree_fields_t = decltype(dax_tree_fields(static_cast<const T*>(nullptr)));

template <class F> struct field_member;
template <class S, class M> struct field_member<TreeField<S, M>> { using type = M; };

template <class T> struct is_tree;

template <class T>
constexpr bool record_is_tree() {
  if constexpr (TreeRecord<T>) {
    using Fields = tree_fields_t<T>;
    return []<size_t... I>(std::index_sequence<I...>) {
      return (is_tree<typename field_member<std::tuple_element_t<I, Fields>>::type>::value && ...);
    }(std::make_index_sequence<std::tuple_size_v<Fields>>{});
  } else {
    return false;
  }
}

template <class T> struct is_tree : std::bool_constant<record_is_tree<T>()> {};
template <class E> struct is_tree<DistArray<E>> : std::true_type {};
template <class T> struct is_tree<std::vector<T>> : is_tree<T> {};
template <class T, size_t N> struct is_tree<std::array<T, N>> : is_tree<T> {};
template <class... T> struct is_tree<std::tuple<T...>> : std::bool_constant<(is_tree<T>::value && ...)> {};
template <class T> struct is_tree<std::map<std::string, T>> : is_tree<T> {};

}  // namespace detail

/// One member of a struct tree, for a class template's hand-written dax_tree_fields (see DAX_TREE).
template <class S, class M>
detail::TreeField<S, M> tree_field(const char* name, M S::*member) {
  return {name, member};
}

/// Whether T (cv-ref ignored) is a tree.
template <class T>
inline constexpr bool is_tree_v = detail::is_tree<std::remove_cvref_t<T>>::value;

template <class T>
concept Tree = is_tree_v<T>;

/// The message of the checks that a type is a tree: what a tree is, and DAX_TREE as the fix.
#define DAX_NOT_A_TREE_MESSAGE(who)                                                                   \
  who " must be a tree of DistArrays: a DistArray, a std::vector / std::array / std::tuple / std::map " \
      "of trees, or a struct of them registered with DAX_TREE(Type, member, ...) after its definition"

namespace detail {

/// Appends one component to a path for the lifetime of the scope.
class PathScope {
 public:
  PathScope(std::string& path, std::string_view part) : path_(path), size_(path.size()) {
    if (!path_.empty()) path_ += '/';
    path_ += part;
  }
  PathScope(const PathScope&) = delete;
  PathScope& operator=(const PathScope&) = delete;
  ~PathScope() { path_.resize(size_); }

 private:
  std::string& path_;
  size_t size_;
};

inline std::string path_text(const std::string& path) { return path.empty() ? "the root" : "'" + path + "'"; }

/// Structure that types cannot show (vector sizes, map keys) checked before any leaf is visited,
/// so a mismatch throws before f has run (and the same on every rank: structure is metadata).
/// Messages read "<op>: <who> differs from <ref> at <path>: ...".
struct StructureCheck {
  const char* op;
  std::string who;
  std::string ref = "the first";

  template <class... Parts>
  [[noreturn]] void fail_at(const std::string& path, const Parts&... parts) const {
    fail(op, ": ", who, " differs from ", ref, " at ", path_text(path), ": ", parts...);
  }
};

template <class T, class U>
void check_same_structure(const StructureCheck& c, std::string& path, const T& a, const U& b) {
  constexpr TreeKind ka = tree_kind<T>(), kb = tree_kind<U>();
  static_assert(ka == kb, "dax: the trees differ in structure (a leaf, std::vector, std::array, std::tuple, "
                          "std::map or DAX_TREE struct in one where the other has something else)");
  if constexpr (ka == TreeKind::vector) {
    if (a.size() != b.size()) c.fail_at(path, "a std::vector of ", b.size(), " entries, not ", a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      PathScope s(path, std::to_string(i));
      check_same_structure(c, path, a[i], b[i]);
    }
  } else if constexpr (ka == TreeKind::array) {
    static_assert(std::tuple_size_v<T> == std::tuple_size_v<U>, "dax: the trees hold std::arrays of different sizes");
    for (size_t i = 0; i < a.size(); ++i) {
      PathScope s(path, std::to_string(i));
      check_same_structure(c, path, a[i], b[i]);
    }
  } else if constexpr (ka == TreeKind::tuple) {
    static_assert(std::tuple_size_v<T> == std::tuple_size_v<U>, "dax: the trees hold std::tuples of different sizes");
    [&]<size_t... I>(std::index_sequence<I...>) {
      auto one = [&]<size_t J>(std::integral_constant<size_t, J>) {
        PathScope s(path, std::to_string(J));
        check_same_structure(c, path, std::get<J>(a), std::get<J>(b));
      };
      (one(std::integral_constant<size_t, I>{}), ...);
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (ka == TreeKind::map) {
    auto ib = b.begin();
    for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib) {
      if (ib == b.end() || ia->first < ib->first) c.fail_at(path, "no key '", ia->first, "'");
      if (ia->first != ib->first) c.fail_at(path, "a key '", ib->first, "' not in ", c.ref);
      PathScope s(path, ia->first);
      check_same_structure(c, path, ia->second, ib->second);
    }
    if (ib != b.end()) c.fail_at(path, "a key '", ib->first, "' not in ", c.ref);
  } else if constexpr (ka == TreeKind::record) {
    static_assert(std::is_same_v<T, U>, "dax: the trees hold different DAX_TREE structs at the same place");
    std::apply(
        [&](const auto&... field) {
          auto one = [&](const auto& fd) {
            PathScope s(path, fd.name);
            check_same_structure(c, path, a.*fd.member, b.*fd.member);
          };
          (one(field), ...);
        },
        dax_tree_fields(static_cast<const T*>(nullptr)));
  }
}

template <class T, class... U>
void check_same_structures([[maybe_unused]] const char* op, const T& tree, const U&... more) {
  std::string path;
  int which = 1;
  (check_same_structure(StructureCheck{op, "tree " + std::to_string(++which)}, path, tree, more), ...);
}

/// The other trees' entries at the same place: the caller has checked the structures match.
template <class M>
auto& entry_of(M& map, const std::string& key) {
  return map.find(key)->second;
}

/// f(path, leaf, leaves...) at every leaf, results in the first tree's structure.
template <class F, class T, class... U>
auto map_tree(std::string& path, F& f, const T& t, const U&... u) {
  constexpr TreeKind kind = tree_kind<T>();
  if constexpr (kind == TreeKind::leaf) {
    using R = decltype(f(std::as_const(path), t, u...));
    static_assert(!std::is_void_v<R>, "dax::tree_map: f must return a value for each leaf (use tree_for_each to visit)");
    return f(std::as_const(path), t, u...);
  } else if constexpr (kind == TreeKind::vector) {
    using R = decltype(map_tree(path, f, t[0], u[0]...));
    std::vector<R> out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size(); ++i) {
      PathScope s(path, std::to_string(i));
      out.push_back(map_tree(path, f, t[i], u[i]...));
    }
    return out;
  } else if constexpr (kind == TreeKind::array) {
    using R = decltype(map_tree(path, f, t[0], u[0]...));
    auto item = [&](size_t i) {
      PathScope s(path, std::to_string(i));
      return map_tree(path, f, t[i], u[i]...);
    };
    // A braced list runs its items left to right: leaves are visited in order.
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return std::array<R, sizeof...(I)>{item(I)...};
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (kind == TreeKind::tuple) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      auto item = [&]<size_t J>(std::integral_constant<size_t, J>) {
        PathScope s(path, std::to_string(J));
        return map_tree(path, f, std::get<J>(t), std::get<J>(u)...);
      };
      using R = std::tuple<decltype(item(std::integral_constant<size_t, I>{}))...>;
      return R{item(std::integral_constant<size_t, I>{})...};
    }(std::make_index_sequence<std::tuple_size_v<T>>{});
  } else if constexpr (kind == TreeKind::map) {
    using R = decltype(map_tree(path, f, t.begin()->second, u.begin()->second...));
    std::map<std::string, R> out;
    for (const auto& [key, value] : t) {
      PathScope s(path, key);
      out.emplace_hint(out.end(), key, map_tree(path, f, value, entry_of(u, key)...));
    }
    return out;
  } else if constexpr (kind == TreeKind::record) {
    T out = t;  // members outside the tree (if any) come from the first tree
    std::apply(
        [&](const auto&... field) {
          auto one = [&](const auto& fd) {
            using M = std::remove_cvref_t<decltype(t.*fd.member)>;
            using R = decltype(map_tree(path, f, t.*fd.member, (u.*fd.member)...));
            static_assert(std::is_same_v<R, M>,
                          "dax::tree_map: a DAX_TREE struct maps to the same struct, so f must keep each "
                          "member's type (same element types); to change them, map a std::tuple or "
                          "std::map tree, or give the struct a counterpart with the new types");
            PathScope s(path, fd.name);
            out.*fd.member = map_tree(path, f, t.*fd.member, (u.*fd.member)...);
          };
          (one(field), ...);
        },
        dax_tree_fields(static_cast<const T*>(nullptr)));
    return out;
  } else {
    static_assert(kind != TreeKind::none, DAX_NOT_A_TREE_MESSAGE("dax: this type"));
  }
}

/// f(path, leaf, leaves...) at every leaf; leaves keep their tree's constness.
template <class F, class T, class... U>
void each_tree(std::string& path, F& f, T& t, U&... u) {
  constexpr TreeKind kind = tree_kind<T>();
  if constexpr (kind == TreeKind::leaf) {
    f(std::as_const(path), t, u...);
  } else if constexpr (kind == TreeKind::vector || kind == TreeKind::array) {
    for (size_t i = 0; i < t.size(); ++i) {
      PathScope s(path, std::to_string(i));
      each_tree(path, f, t[i], u[i]...);
    }
  } else if constexpr (kind == TreeKind::tuple) {
    [&]<size_t... I>(std::index_sequence<I...>) {
      auto one = [&]<size_t J>(std::integral_constant<size_t, J>) {
        PathScope s(path, std::to_string(J));
        each_tree(path, f, std::get<J>(t), std::get<J>(u)...);
      };
      (one(std::integral_constant<size_t, I>{}), ...);
    }(std::make_index_sequence<std::tuple_size_v<std::remove_const_t<T>>>{});
  } else if constexpr (kind == TreeKind::map) {
    for (auto& [key, value] : t) {
      PathScope s(path, key);
      each_tree(path, f, value, entry_of(u, key)...);
    }
  } else if constexpr (kind == TreeKind::record) {
    std::apply(
        [&](const auto&... field) {
          auto one = [&](const auto& fd) {
            PathScope s(path, fd.name);
            each_tree(path, f, t.*fd.member, (u.*fd.member)...);
          };
          (one(field), ...);
        },
        dax_tree_fields(static_cast<const std::remove_const_t<T>*>(nullptr)));
  } else {
    static_assert(kind != TreeKind::none, DAX_NOT_A_TREE_MESSAGE("dax: this type"));
  }
}

}  // namespace detail

/// A tree of the same structure whose leaves are f(leaf, leaves of `more` at the same place...).
/// f may return anything (a DistArray of another element type, a number, a NamedSharding): a
/// std::vector / std::array / std::tuple / std::map keeps its shape with the new values; a
/// DAX_TREE struct maps to the same struct, so f must keep each of its members' types (checked at
/// compile time). `more` must have the same structure (dax::Error naming the path where they
/// differ, before f runs); their leaves may have other element types. Leaves are visited in
/// tree_for_each's order.
template <class F, Tree T, Tree... U>
auto tree_map(F&& f, const T& tree, const U&... more) {
  detail::check_same_structures("tree_map", tree, more...);
  auto leaf = [&f](const std::string&, const auto&... leaves) -> decltype(auto) { return f(leaves...); };
  std::string path;
  return detail::map_tree(path, leaf, tree, more...);
}

/// tree_map with each leaf's path first: f(path, leaf, leaves...). Paths join the components
/// from the root with '/': a std::vector / std::array / std::tuple entry by its index, a std::map
/// entry by its key, a DAX_TREE member by its name ("layers/0/w"); a lone leaf's path is "".
template <class F, Tree T, Tree... U>
auto tree_map_with_path(F&& f, const T& tree, const U&... more) {
  detail::check_same_structures("tree_map_with_path", tree, more...);
  std::string path;
  return detail::map_tree(path, f, tree, more...);
}

/// f(leaf, leaves of `more`...) at every leaf, in a fixed order: depth first; vector / array /
/// tuple entries by index, map entries by key (sorted), DAX_TREE members in the macro's order.
/// Leaves are passed as references with their tree's constness: a non-const tree gives
/// `DistArray<T>&` leaves that f may replace.
template <class F, class T, class... U>
  requires Tree<T> && (Tree<U> && ...)
void tree_for_each(F&& f, T&& tree, U&&... more) {
  detail::check_same_structures("tree_for_each", tree, more...);
  auto leaf = [&f](const std::string&, auto&... leaves) { f(leaves...); };
  std::string path;
  detail::each_tree(path, leaf, tree, more...);
}

/// tree_for_each with each leaf's path first: f(path, leaf, leaves...).
template <class F, class T, class... U>
  requires Tree<T> && (Tree<U> && ...)
void tree_for_each_with_path(F&& f, T&& tree, U&&... more) {
  detail::check_same_structures("tree_for_each_with_path", tree, more...);
  std::string path;
  detail::each_tree(path, f, tree, more...);
}

/// The number of leaves.
template <Tree T>
size_t tree_size(const T& tree) {
  size_t n = 0;
  tree_for_each([&n](const auto&) { ++n; }, tree);
  return n;
}

/// Every leaf's path, in tree_for_each's order.
template <Tree T>
std::vector<std::string> tree_paths(const T& tree) {
  std::vector<std::string> out;
  tree_for_each_with_path([&out](const std::string& path, const auto&) { out.push_back(path); }, tree);
  return out;
}

}  // namespace dax

/// Declares a struct a tree whose leaves are the listed members (each a tree), visited and named
/// in this order: `DAX_TREE(MyParams, w1, b1, w2)` (a `;` after it is optional) at namespace scope
/// after the struct, in the struct's own namespace (it is found by argument-dependent lookup), up
/// to 64 members. Other members are left out
/// of the tree (tree_map copies them from its first tree). For a class template, write the same
/// function by hand beside it: `template <class T> auto dax_tree_fields(const S<T>*) { return
/// std::make_tuple(dax::tree_field("w", &S<T>::w), dax::tree_field("b", &S<T>::b)); }`.
#define DAX_TREE(Type, ...)                                                                          \
  [[maybe_unused]] inline auto dax_tree_fields(const Type*) {                                        \
    return ::std::make_tuple(DAX_PP_FOR_EACH(DAX_TREE_FIELD_, Type, __VA_ARGS__));                   \
  }                                                                                                  \
  [[maybe_unused]] inline void dax_tree_check(const Type*) {                                         \
    static_assert(::dax::is_tree_v<Type>, "DAX_TREE(" #Type ", ...): every listed member must be a " \
                                          "tree: a DistArray, or a std::vector, std::array, "        \
                                          "std::tuple or std::map<std::string, ...> of trees, or "   \
                                          "a DAX_TREE struct (declared in its own namespace)");      \
  }
#define DAX_TREE_FIELD_(Type, member) \
  ::dax::detail::TreeField<Type, decltype(Type::member)> { #member, &Type::member }
