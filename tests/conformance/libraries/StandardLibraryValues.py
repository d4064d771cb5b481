"""Values of Robot Framework's standard libraries made comparable across two imports.

An XML element has no equality of its own (two parses of one text differ), nor has a Secret: each
becomes its class name and its content (an element serialized), in plain lists, tuples and dicts at
any depth. Everything else is compared as it is, so a path stays a path and a complex a complex.
"""
import xml.etree.ElementTree as ET

from robot.api.types import Secret


def comparable_value(value):
    if isinstance(value, ET.Element):
        return ("Element", ET.tostring(value))
    if isinstance(value, Secret):
        return ("Secret", value.value)
    if type(value) in (list, tuple):
        return type(value)(comparable_value(item) for item in value)
    if type(value) is dict:
        return {key: comparable_value(item) for key, item in value.items()}
    return value
