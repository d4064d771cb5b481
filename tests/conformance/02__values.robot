*** Settings ***
Documentation     Every type the stock client and the reference server pickle, both ways: the client
...               sends a value and the worker describes what arrived (type and repr); the worker
...               builds the same value and the client checks what it got.
Library           JsonRpcRemote    ${GATEWAY}#values    Values    AS    Values
Library           JsonRpcRemote    ${GATEWAY}#values    Values    first    ${2}    named=value    AS    WithArguments
Library           JsonRpcRemote    ${GATEWAY}#values-complex    Values    AS    Complex
Test Template     Crosses Both Ways

*** Variables ***
${MODULES}        datetime,decimal,collections,robot.utils,pathlib

*** Test Cases ***                            EXPRESSION
Text                                          'héllo wörld ✓ \\t tab'
Robot Syntax In Text Arrives As Sent          '$' + '{SPACE} @' + '{list} &' + '{dict} %' + '{HOME} ' + chr(92) + 'n name=value ' + chr(92)
Empty Text                                    ''
Integer                                       42
Integer Beyond 64 Bits                        2**100
Negative Integer Beyond 64 Bits               -(2**70) - 1
Float                                         3.25
Infinity                                      float('inf')
Minus Infinity                                float('-inf')
NaN                                           float('nan')
Boolean                                       True
None                                          None
Bytes                                         bytes([0, 1, 36, 123, 254, 255]) + b' bytes'
Bytearray                                     bytearray(b'abc')
Tuple                                         (1, 'two', 3.0, None)
Set                                           {1, 2, 3}
Frozenset                                     frozenset({4, 5})
Empty List                                    list()
List                                          list((1, 'two', 3.5, None, True))
Dict                                          {'a': 1, 'b': 'two', 'c': None}
Dict With Non-String Keys                     {1: 'one', (2, 3): 'pair', None: 'none', 4.5: 'float'}
Nested Structure                              {'list': [1, [2, [3, {'deep': (4, 5)}]]], 'dict': {'x': {'y': {1, 2}}}}
List Holding Robot Syntax                     list(('$' + '{SPACE}', '@' + '{x}'))
OrderedDict                                   collections.OrderedDict([('b', 1), ('a', 2)])
DotDict                                       robot.utils.DotDict(first=1, second={'nested': 2})
Datetime                                      datetime.datetime(2024, 2, 29, 23, 59, 58, 123456)
Date                                          datetime.date(2024, 2, 29)
Time                                          datetime.time(23, 59, 58)
Timedelta                                     datetime.timedelta(days=1, seconds=2, microseconds=3)
Decimal                                       decimal.Decimal('3.14159265358979323846264338327950288')
Bytes Holding A Backslash                     bytes([0, 255, 128, 92, 34]) + b' bytes'

Complex Number
    complex(1, 2)    Complex

Path
    pathlib.PosixPath('/tmp/a b')    Complex

Pure Path
    pathlib.PurePosixPath('a/b')    Complex

Text Of Several Megabytes
    [Template]    Large Value Crosses Both Ways
    'x' * 5_000_000
    'héllo ✓ ' * 400_000

Bytes Of Several Megabytes (Every Byte Value)
    [Template]    Large Value Crosses Both Ways
    bytes(range(256)) * 10_000

Named Arguments Cross As Well
    [Template]    NONE
    ${value} =    Evaluate    {1: (2, 3), 'b': b'bytes'}
    ${seen} =    Values.Describe    value=${value}
    Should Be Equal    ${seen}    dict:{1: (2, 3), 'b': b'bytes'}

Import Arguments Arrive
    [Template]    NONE
    ${arguments} =    WithArguments.Get Import Arguments
    Should Be Equal    ${arguments}    ${{[['first', 2], {'named': 'value'}]}}

*** Keywords ***
Crosses Both Ways
    [Arguments]    ${expression}    ${library}=Values
    ${value} =    Evaluate    ${expression}    modules=${MODULES}
    ${expected} =    Evaluate    '%s:%r' % (type($value).__name__, $value)
    ${seen} =    Run Keyword    ${library}.Describe    ${value}
    Should Be Equal    ${seen}    ${expected}    the worker received another value
    ${made} =    Run Keyword    ${library}.Make    ${expression}
    ${got} =    Evaluate    '%s:%r' % (type($made).__name__, $made)
    Should Be Equal    ${got}    ${expected}    the client received another value

Large Value Crosses Both Ways
    [Arguments]    ${expression}    ${library}=Values
    ${value} =    Evaluate    ${expression}
    ${expected} =    Describe Locally    ${value}
    ${seen} =    Run Keyword    ${library}.Describe Large    ${value}
    Should Be Equal    ${seen}    ${expected}    the worker received another value
    ${made} =    Run Keyword    ${library}.Make    ${expression}
    ${got} =    Describe Locally    ${made}
    Should Be Equal    ${got}    ${expected}    the client received another value

Describe Locally
    [Arguments]    ${value}
    ${data} =    Evaluate    $value.encode('utf-8') if isinstance($value, str) else bytes($value)
    ${digest} =    Evaluate    hashlib.sha256($data).hexdigest()    modules=hashlib
    RETURN    ${{'%s:%d:%s' % (type($value).__name__, len($value), $digest)}}
