*** Settings ***
Documentation     Robot Framework's standard libraries served by the reference server, through the
...               gateway and directly (the lab's reference server in TCP mode): each keyword has the
...               same outcome both ways, the same value or the same failure. The values these libraries
...               return and take that the data-only pickle policy admits for them (XML elements, paths,
...               complex numbers, Secret) cross both ways.
Library           JsonRpcRemote    ${REFERENCE_SERVER}    String    AS    DirectString
Library           JsonRpcRemote    ${REFERENCE_SERVER}    Collections    AS    DirectCollections
Library           JsonRpcRemote    ${REFERENCE_SERVER}    DateTime    AS    DirectDateTime
Library           JsonRpcRemote    ${REFERENCE_SERVER}    XML    AS    DirectXML
Library           JsonRpcRemote    ${REFERENCE_SERVER}    OperatingSystem    AS    DirectOperatingSystem
Library           JsonRpcRemote    ${GATEWAY}#stdlib    String    AS    GatewayString
Library           JsonRpcRemote    ${GATEWAY}#stdlib    Collections    AS    GatewayCollections
Library           JsonRpcRemote    ${GATEWAY}#stdlib    DateTime    AS    GatewayDateTime
Library           JsonRpcRemote    ${GATEWAY}#stdlib    XML    AS    GatewayXML
Library           JsonRpcRemote    ${GATEWAY}#stdlib    OperatingSystem    AS    GatewayOperatingSystem
Library           JsonRpcRemote    ${GATEWAY}#stdlib-element    XML    AS    ElementXML
Library           libraries/StandardLibraryValues.py
Test Template     Same Outcome As Directly

*** Variables ***
${XML_TEXT}       <root><item id="1">one</item><item id="2">two</item></root>
${NS_TEXT}        <root xmlns="urn:default" xmlns:n="urn:n" a="1"><n:item id="1">one</n:item>between<item>two<sub/>tail</item></root>

*** Test Cases ***                LIBRARY            KEYWORD                     ARGUMENTS (positional only: the template passes them on as a list)
String                            String             Get Line Count              first\nsecond\nthird
                                  String             Replace String              hello world    world    there
                                  String             Split String                a,b,,c    ,
                                  String             Encode String To Bytes      héllo    UTF-8
                                  String             Decode Bytes To String      ${{'héllo'.encode()}}    UTF-8
                                  String             Should Be Lower Case        NOT LOWER
                                  String             Decode Bytes To String      ${{b'\\x00\\xff\\x80\\\\" bytes'}}    latin-1
                                  String             Get Regexp Matches          a1b2    ([a-z])([0-9])    1    2
                                  String             Convert To Title Case       ${{pathlib.PurePosixPath('a b/c d')}}

Collections                       Collections        Combine Lists               ${{[1, 2]}}    ${{(3, 4)}}
                                  Collections        Get Dictionary Keys         ${{{'b': 1, 'a': 2}}}
                                  Collections        Get From Dictionary         ${{{1: 'one'}}}    ${1}    ${None}
                                  Collections        Convert To List             ${{(1, 'two')}}
                                  Collections        Lists Should Be Equal       ${{[1]}}    ${{[2]}}
                                  Collections        Convert To List             ${{(1+2j, complex(0, -1), complex(-0.0, float('inf')))}}
                                  Collections        Get From Dictionary         ${{{'c': 1+2j, 2j: 'imaginary key'}}}    ${{2j}}    ${None}
                                  Collections        Count Values In List        ${{[1+2j, 1+2j, 1]}}    ${{1+2j}}
                                  Collections        Convert To List             ${{(pathlib.Path('/tmp/a b'), pathlib.PurePosixPath('a/b'), pathlib.Path())}}
                                  Collections        Get Dictionary Keys         ${{{pathlib.Path('/b'): 1, pathlib.Path('/a'): 2}}}
                                  Collections        Convert To List             ${{(robot.api.types.Secret('s3cr3t'),)}}
                                  Collections        Get From List               ${{[xml.etree.ElementTree.fromstring($XML_TEXT)]}}    0

DateTime                          DateTime           Convert Date                2024-02-29 12:00:00    datetime
                                  DateTime           Add Time To Date            2024-02-29 12:00:00    1 day
                                  DateTime           Subtract Date From Date     2024-03-01    2024-02-29
                                  DateTime           Convert Time                1 minute 30 seconds    timedelta
                                  DateTime           Convert Date                ${{datetime.date(2024, 2, 29)}}    %d.%m.%Y
                                  DateTime           Convert Date                2024-02-29 12:00:00    epoch
                                  DateTime           Add Time To Time            1 min    2 s    timedelta
                                  DateTime           Subtract Time From Date     2024-03-01    1 day    datetime
                                  DateTime           Convert Date                ${{datetime.datetime(2024, 2, 29, 12, tzinfo=datetime.timezone.utc)}}    datetime
                                  DateTime           Convert Time                ${{datetime.timedelta(seconds=90)}}    verbose

XML As Text                       XML                Get Element Text            ${XML_TEXT}    item
                                  XML                Get Element Count           ${XML_TEXT}    item
                                  XML                Get Elements Texts          ${XML_TEXT}    item
                                  XML                Element Attribute Should Be    ${XML_TEXT}    id    2    item

XML Elements
    [Template]    Same Outcome Both Ways
    DirectXML    ElementXML    Parse XML    ${XML_TEXT}
    DirectXML    ElementXML    Get Element    ${XML_TEXT}    item[2]
    DirectXML    ElementXML    Get Elements    ${XML_TEXT}    item
    DirectXML    ElementXML    Get Child Elements    ${XML_TEXT}
    DirectXML    ElementXML    Get Element    ${XML_TEXT}    nothing
    DirectXML    ElementXML    Parse XML    ${NS_TEXT}
    DirectXML    ElementXML    Parse XML    ${NS_TEXT}    ${True}
    DirectXML    ElementXML    Parse XML    ${NS_TEXT}    ${False}    ${True}
    DirectXML    ElementXML    Copy Element    ${XML_TEXT}
    DirectXML    ElementXML    Add Element    ${XML_TEXT}    <new a="b">text</new>
    DirectXML    ElementXML    Remove Elements    ${XML_TEXT}    item[@id='1']

XML Elements As Arguments
    [Documentation]    The client pickles an element it holds (here one it parsed itself) into the call.
    [Template]    Same Outcome Both Ways
    DirectXML    ElementXML    Get Element Text    ${{xml.etree.ElementTree.fromstring($XML_TEXT)}}    item[2]
    DirectXML    ElementXML    Get Elements Texts    ${{xml.etree.ElementTree.fromstring($NS_TEXT)}}    .//*
    DirectXML    ElementXML    Element Attribute Should Be    ${{xml.etree.ElementTree.fromstring($XML_TEXT)}}    id    2    item[2]
    DirectXML    ElementXML    Element To String    ${{xml.etree.ElementTree.fromstring($NS_TEXT)}}
    DirectXML    ElementXML    Set Element Tag    ${{xml.etree.ElementTree.fromstring($XML_TEXT)}}    renamed
    DirectXML    ElementXML    Elements Should Be Equal    ${{xml.etree.ElementTree.fromstring($XML_TEXT)}}    ${XML_TEXT}
    DirectXML    ElementXML    Elements Should Be Equal    ${{xml.etree.ElementTree.fromstring($XML_TEXT)}}    <root/>

OperatingSystem                   OperatingSystem    Join Path                   ${LAB_DIR}    gateway.toml
                                  OperatingSystem    Normalize Path              ${LAB_DIR}/../lab/./gateway.toml
                                  OperatingSystem    File Should Exist           ${LAB_DIR}/gateway.toml
                                  OperatingSystem    Get File Size               ${LAB_DIR}/gateway.toml
                                  OperatingSystem    File Should Exist           ${LAB_DIR}/no-such-file
                                  OperatingSystem    Join Path                   ${{pathlib.Path('/tmp')}}    x
                                  OperatingSystem    Normalize Path              ${{pathlib.PurePosixPath('/tmp/../tmp/./x')}}
                                  OperatingSystem    Split Path                  ${{pathlib.Path('/tmp/x.txt')}}
                                  OperatingSystem    Get File Size               ${{pathlib.Path($LAB_DIR) / 'gateway.toml'}}
                                  OperatingSystem    File Should Exist           ${{pathlib.Path($LAB_DIR) / 'no-such-file'}}
                                  OperatingSystem    Set Environment Variable    RJG_SECRET    ${{robot.api.types.Secret('s3cr3t')}}
                                  OperatingSystem    Get Environment Variable    RJG_SECRET
                                  OperatingSystem    Create File                 ${LAB_DIR}/secret.txt    ${{robot.api.types.Secret('s3cr3t')}}
                                  OperatingSystem    Get File                    ${LAB_DIR}/secret.txt

OperatingSystem Environment
    [Documentation]    The two servers run in processes of their own, so their environments differ:
    ...    both return a dict of str to str.
    [Template]    NONE
    ${direct} =    DirectOperatingSystem.Get Environment Variables
    ${through} =    GatewayOperatingSystem.Get Environment Variables
    FOR    ${variables}    IN    ${direct}    ${through}
        Should Be True    type($variables) is dict and $variables
        Should Be True    all(type(k) is str and type(v) is str for k, v in $variables.items())
    END

*** Keywords ***
Same Outcome As Directly
    [Arguments]    ${library}    ${keyword}    @{arguments}
    Same Outcome Both Ways    Direct${library}    Gateway${library}    ${keyword}    @{arguments}

Same Outcome Both Ways
    [Documentation]    Runs KEYWORD of the import DIRECT (the reference server) and of the import THROUGH
    ...    (the gateway): both pass with the same value, or both fail with the same message (in which
    ...    Robot names the import). XML elements and Secrets are compared by their contents
    ...    (libraries/StandardLibraryValues.py).
    [Arguments]    ${direct}    ${through}    ${keyword}    @{arguments}
    ${expected} =    Run Keyword And Ignore Error    ${direct}.${keyword}    @{arguments}
    ${outcome} =    Run Keyword And Ignore Error    ${through}.${keyword}    @{arguments}
    ${expected} =    Comparable    ${expected}    ${direct}
    ${outcome} =    Comparable    ${outcome}    ${through}
    Should Be Equal    ${outcome}    ${expected}
    ...    ${keyword}: ${expected}[0] directly (${expected}[1]), ${outcome}[0] through the gateway (${outcome}[1])
    ...    values=False

Comparable
    [Arguments]    ${outcome}    ${import}
    ${status}    ${value} =    Set Variable    ${outcome}
    IF    $status == 'FAIL'    RETURN    ${{('FAIL', $value.replace($import + '.', 'IMPORT.'))}}
    ${value} =    Comparable Value    ${value}
    RETURN    ${{('PASS', $value)}}
