"""UserFunctionError: what a failing user function's error says, without Spark."""

import pickle

import pytest

from stateengine import StateEngineError, UserFunctionError
from stateengine.spark.user_errors import NO_KEY, CallSite, function_name, lazy_result


def lookup(table, name):
    return table[name]


def failing_fn(key, rows, ctx):
    return lookup({}, key)


def generating_fn(rows, ctx):
    yield 1
    raise ValueError("second item\nmore detail")


class Proc:
    def handleInputRows(self, key, rows, timer_values):
        raise ZeroDivisionError("division by zero")


SITE = CallSite("agg", 0, 1)


def test_first_line_names_function_exception_operator_key_batch_and_partition():
    with pytest.raises(UserFunctionError) as info:
        SITE.call(failing_fn, "b", "b", None, None)
    err = info.value
    first = str(err).splitlines()[0]
    assert first == ("user function tests.test_user_errors.failing_fn raised KeyError: 'b' "
                     "(operator 'agg', key 'b', batch 0, partition 1)")
    assert isinstance(err, StateEngineError) and isinstance(err, RuntimeError)
    assert isinstance(err.__cause__, KeyError)
    assert (err.function, err.operator, err.key, err.batch_id, err.partition) == \
        ("tests.test_user_errors.failing_fn", "agg", "b", 0, 1)


def test_message_carries_the_users_traceback_as_text_without_the_wrappers_frame():
    with pytest.raises(UserFunctionError) as info:
        SITE.call(failing_fn, "b", "b", None, None)
    text = str(info.value)
    assert "The function's traceback (most recent call last):" in text
    assert "in failing_fn" in text and "in lookup" in text and "return table[name]" in text
    assert text.rstrip().endswith("KeyError: 'b'")
    assert "spark/user_errors.py" not in text  # the frame that caught it is not the user's


def test_methods_are_named_by_class_and_a_site_without_key_or_batch_omits_them():
    site = CallSite(None, None, 3)
    with pytest.raises(UserFunctionError) as info:
        site.call(Proc().handleInputRows, NO_KEY, ("k",), iter(()), None)
    assert str(info.value).splitlines()[0] == (
        "user function tests.test_user_errors.Proc.handleInputRows raised "
        "ZeroDivisionError: division by zero (partition 3)")
    assert function_name(Proc()) == "tests.test_user_errors.Proc"


def test_generator_errors_are_caught_per_item_and_multi_line_messages_keep_line_one():
    result = generating_fn(None, None)
    assert lazy_result(result) and not lazy_result([1]) and not lazy_result(None)
    items = SITE.iterate(generating_fn, NO_KEY, result)
    assert next(items) == 1
    with pytest.raises(UserFunctionError) as info:
        next(items)
    lines = str(info.value).splitlines()
    assert lines[0] == ("user function tests.test_user_errors.generating_fn raised ValueError: "
                        "second item (operator 'agg', batch 0, partition 1)")
    assert "more detail" in str(info.value) and "in generating_fn" in str(info.value)


def test_nested_user_function_errors_pass_through_and_long_keys_are_shortened():
    inner = SITE.error(failing_fn, KeyError("x"), "x")
    assert SITE.error(failing_fn, inner, "y") is inner
    err = SITE.error(failing_fn, ValueError(""), "k" * 1000)
    first = str(err).splitlines()[0]
    assert "raised ValueError (operator" in first and len(first) < 400 and "...'" not in first


def test_the_error_pickles_with_its_attributes():
    err = SITE.error(failing_fn, KeyError("b"), "b")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.key == "b" and back.partition == 1
