// Where dax's type-independent functions are compiled. Header-only use (the default: `-I include`
// is enough) compiles them inline in every translation unit that uses them. A program built
// through CMake's dax::dax (DAX_COMPILED_LIBRARY) links dax's compiled library instead, which holds
// them once (src/library.cpp, DAX_LIBRARY_SOURCE), so its own units see only their declarations
// and skip the headers those bodies need. nvcc builds always use the headers: the library is
// compiled by the host compiler for the CPU backend.
#pragma once

#if defined(DAX_LIBRARY_SOURCE) || !defined(DAX_COMPILED_LIBRARY) || defined(DAX_HAS_CUDA)
/// 1 where the bodies of the functions marked DAX_OUTLINE are compiled in this translation unit.
#define DAX_HEADER_DEFINITIONS 1
#else
#define DAX_HEADER_DEFINITIONS 0
#endif

/// Marks those functions: inline in header-only use; in compiled mode an ordinary declaration here
/// and the one strong definition in the library.
#if DAX_HEADER_DEFINITIONS && !defined(DAX_LIBRARY_SOURCE)
#define DAX_OUTLINE inline
#else
#define DAX_OUTLINE
#endif
