"use strict";
function widgetRuleToHclTerraform(struct) {
    if (!cdktf.canInspect(struct) || cdktf.Tokenization.isResolvable(struct)) {
        return struct;
    }
    const attrs = {
        port: {
            value: cdktf.numberToHclTerraform(struct.port),
            isBlock: false,
            type: "simple",
            storageClassType: "number",
        },
        cidrs: {
            value: cdktf.listMapperHcl(cdktf.stringToHclTerraform, false)(struct.cidrs),
            isBlock: false,
            type: "set",
            storageClassType: "stringList",
        },
        target: {
            value: widgetRuleTargetToHclTerraform(struct.target),
            isBlock: true,
            type: "list",
            storageClassType: "WidgetRuleTargetList",
        },
    };
    return Object.fromEntries(Object.entries(attrs).filter(([_, value]) => value !== undefined && value.value !== undefined));
}
function widgetRuleTargetToHclTerraform(struct) {
    const attrs = {
        arn: {
            value: cdktf.stringToHclTerraform(struct.arn),
            isBlock: false,
            type: "simple",
            storageClassType: "string",
        },
    };
    return attrs;
}
function widgetTimeoutsToHclTerraform(struct) {
    const attrs = {
        create: {
            value: cdktf.stringToHclTerraform(struct.create),
            isBlock: false,
            type: "simple",
            storageClassType: "string",
        },
    };
    return attrs;
}
class Widget extends cdktf.TerraformResource {
    synthesizeHclAttributes() {
        const attrs = {
            name: {
                value: cdktf.stringToHclTerraform(this._name),
                isBlock: false,
                type: "simple",
                storageClassType: "string",
            },
            labels: {
                value: cdktf.hashMapperHcl(cdktf.stringToHclTerraform)(this._labels),
                isBlock: false,
                type: "map",
                storageClassType: "stringMap",
            },
            matrix: {
                value: cdktf.listMapperHcl(cdktf.listMapperHcl(cdktf.numberToHclTerraform, false), false)(this._matrix),
                isBlock: false,
                type: "list",
                storageClassType: "numberListList",
            },
            rule: {
                value: cdktf.listMapperHcl(widgetRuleToHclTerraform, true)(this._rule.internalValue),
                isBlock: true,
                type: "set",
                storageClassType: "WidgetRuleList",
            },
            timeouts: {
                value: widgetTimeoutsToHclTerraform(this._timeouts.internalValue),
                isBlock: true,
                type: "struct",
                storageClassType: "WidgetTimeouts",
            },
        };
        return Object.fromEntries(Object.entries(attrs).filter(([_, value]) => value !== undefined && value.value !== undefined));
    }
}
exports.Widget = Widget;
Widget.tfResourceType = "aws_widget";
