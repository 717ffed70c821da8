# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: embedsignature=True
# distutils: language = c++
"""Typed bindings over the C++ core in csrc/. Glue only: the byte layouts, hashing, RocksDB
handling and merge operators live in C++; this module unboxes Python objects, releases the GIL
around RocksDB and turns statuses into exceptions (check_status, nowhere else)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.math cimport isinf, isnan
from libc.string cimport memcmp, memcpy
from libcpp cimport bool as cbool
from libcpp.memory cimport unique_ptr
from libcpp.string cimport string
from libcpp.vector cimport vector
from cpython.exc cimport PyErr_Clear

from stateengine.includes.libstateengine cimport *

import copy
import pickle

import numpy as np

from stateengine import errors

include "_codecs.pxi"
include "_rows.pxi"
include "_status.pxi"
include "_hashing.pxi"
include "_backend.pxi"
include "_state.pxi"
include "_snapshot.pxi"
include "_batch.pxi"
include "_legacy.pxi"
